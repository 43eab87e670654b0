package txn

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
)

// intent is the payload of a WAL INTENT record: everything recovery needs to verify the
// transaction's records and re-propose its COMMIT. The WAL envelope around it carries the
// magic, the txn ID and the checksum (wal/doc.go).
//
// INTENT body wire format (version 1), fields in order, no padding. The constants are
// on-disk format.
//
//	byte 0    intentVersion (1)
//	node str | n uvarint | n x entry            node: the COMMIT's, which wrote the records
//
//	entry:    key str | bucket uvarint (< 2^32) | offset varint | length varint |
//	          size uvarint (< 2^32) | sum uint64 little-endian | gen uvarint
//	str:      uvarint length | bytes
//
// varint is zigzag. After the version byte it is a COMMIT command's body after its txn ID,
// written and read by fsm.AppendEntries and fsm.DecodeEntries, but versioned apart from it.
// An entry's Owner and TxnID are not encoded (the node and the WAL record's txn ID name
// them). Node n1, one entry k in bucket 1 at offset 0, length 4096, size 4, sum
// 0x0102030405060708, gen 1:
//
//	01 | 02 6e 31 | 01 | 01 6b  01  00  80 40  04  08 07 06 05 04 03 02 01  01
//
// Encoding is deterministic. Decoding rejects a count that cannot fit in the bytes left, a
// bucket or size over 2^32 - 1, a truncated field and trailing bytes, every error wrapping
// errBadIntent, and never panics (FuzzDecodeIntent). TestIntentGolden holds the bytes to
// testdata/intent-v1.golden.
//
// Binaries before version 1 wrote encoding/json of an intent (jsonIntent), which begins
// with '{' (testdata/intent-json.golden); decodeIntent still reads it, so a data directory
// they wrote opens and recovers (TestRecoverJSONIntent), and refuses any other first byte
// but 1. Those binaries cannot read version 1 (docs/format.md: no downgrade).
type intent struct {
	Node    string
	Entries []fsm.Entry
}

const intentVersion = 1

// errBadIntent: an INTENT body that does not decode. Every error of decodeIntent wraps it.
var errBadIntent = errors.New("txn: malformed intent")

// jsonIntent is the INTENT body of binaries before version 1, in their JSON field names.
type jsonIntent struct {
	Node    string      `json:"node"`
	Entries []jsonEntry `json:"entries"`
}

type jsonEntry struct {
	Key    string `json:"key"`
	Bucket uint32 `json:"bucket"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
	Size   uint32 `json:"size"`
	Sum    uint64 `json:"sum"`
	Gen    uint64 `json:"gen"`
}

func (j jsonIntent) intent() intent {
	in := intent{Node: j.Node, Entries: make([]fsm.Entry, len(j.Entries))}
	for i, e := range j.Entries {
		in.Entries[i] = fsm.Entry{Key: e.Key, Extent: fsm.Extent{Bucket: e.Bucket, Offset: e.Offset, Length: e.Length},
			Size: e.Size, Sum: e.Sum, Gen: e.Gen}
	}
	return in
}

// recordHeader is the header of the record holding e's bytes, written by transaction id.
func recordHeader(e fsm.Entry, id fsm.TxnID) bucketstore.Header {
	return bucketstore.Header{Key: e.Key, TxnID: id, Generation: e.Gen, PayloadLen: e.Size, PayloadSum: e.Sum}
}

// encode returns the version 1 body of in.
func (in intent) encode() []byte {
	b := make([]byte, 1, 1+binary.MaxVarintLen64+len(in.Node)+len(in.Entries)*48)
	b[0] = intentVersion
	return fsm.AppendEntries(b, in.Node, in.Entries)
}

// decodeIntent reads a version 1 body, or the JSON of binaries before it. An intent without
// entries has nil Entries, whichever form it came in.
func decodeIntent(b []byte) (intent, error) {
	var in intent
	switch {
	case len(b) == 0:
		return intent{}, fmt.Errorf("%w: empty", errBadIntent)
	case b[0] == '{':
		var j jsonIntent
		if err := json.Unmarshal(b, &j); err != nil {
			return intent{}, fmt.Errorf("%w: json: %w", errBadIntent, err)
		}
		in = j.intent()
	case b[0] == intentVersion:
		var err error
		if in.Node, in.Entries, err = fsm.DecodeEntries(b[1:]); err != nil {
			return intent{}, fmt.Errorf("%w: %w", errBadIntent, err)
		}
	default:
		return intent{}, fmt.Errorf("%w: version %d, this binary reads version %d (and JSON)", errBadIntent, b[0], intentVersion)
	}
	if len(in.Entries) == 0 {
		in.Entries = nil
	}
	return in, nil
}

// commitCmd is the COMMIT command (fsm.EncodeCommit) of the intent's entries under txn id.
func (in intent) commitCmd(id fsm.TxnID) []byte {
	return fsm.EncodeCommit(fsm.Commit{TxnID: id, Node: in.Node, Entries: in.Entries})
}
