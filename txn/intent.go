package txn

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
)

// intent is the payload of a WAL INTENT record: everything recovery needs to verify the
// transaction's records and re-propose its COMMIT. The WAL envelope around it carries the
// magic, the txn ID and the checksum (wal/doc.go).
//
// INTENT body wire format (version 1). The constants are on-disk format.
//
//	byte 0    intentVersion (1)
//	node str | n uvarint | n x entry
//
//	entry:    key str | bucket uvarint | offset varint | length varint |
//	          size uvarint | sum uint64 little-endian | gen uvarint
//	str:      uvarint length | bytes
//
// The entry is the same as a COMMIT command's (fsm/codec.go), but versioned apart from it.
// Encoding is deterministic; decoding rejects trailing bytes and never panics.
//
// Binaries before version 1 wrote encoding/json of intent (the json tags below), which
// begins with '{'; decodeIntent still reads it, so a data directory they wrote opens and
// recovers. Those binaries cannot read version 1.
type intent struct {
	Node    string        `json:"node"`
	Entries []intentEntry `json:"entries"`
}

type intentEntry struct {
	Key    string `json:"key"`
	Bucket uint32 `json:"bucket"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
	Size   uint32 `json:"size"`
	Sum    uint64 `json:"sum"`
	Gen    uint64 `json:"gen"`
}

const intentVersion = 1

// minIntentEntry is the least an encoded entry takes (empty key, every varint one byte).
const minIntentEntry = 1 + 1 + 1 + 1 + 1 + 8 + 1

// errBadIntent: an INTENT body that does not decode. Every error of decodeIntent wraps it.
var errBadIntent = errors.New("txn: malformed intent")

func (e intentEntry) extent() bucketstore.Extent {
	return bucketstore.Extent{Bucket: e.Bucket, Offset: e.Offset, Length: e.Length}
}

func (e intentEntry) header(id fsm.TxnID) bucketstore.Header {
	return bucketstore.Header{Key: e.Key, TxnID: id, Generation: e.Gen, PayloadLen: e.Size, PayloadSum: e.Sum}
}

func (e intentEntry) fsmEntry() fsm.Entry {
	return fsm.Entry{
		Key:    e.Key,
		Extent: fsm.Extent{Bucket: e.Bucket, Offset: e.Offset, Length: e.Length},
		Size:   e.Size,
		Sum:    e.Sum,
		Gen:    e.Gen,
	}
}

// encode returns the version 1 body of in.
func (in intent) encode() []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(in.Node)+len(in.Entries)*48)
	b = append(b, intentVersion)
	b = appendStr(b, in.Node)
	b = binary.AppendUvarint(b, uint64(len(in.Entries)))
	for _, e := range in.Entries {
		b = appendStr(b, e.Key)
		b = binary.AppendUvarint(b, uint64(e.Bucket))
		b = binary.AppendVarint(b, e.Offset)
		b = binary.AppendVarint(b, e.Length)
		b = binary.AppendUvarint(b, uint64(e.Size))
		b = binary.LittleEndian.AppendUint64(b, e.Sum)
		b = binary.AppendUvarint(b, e.Gen)
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decodeIntent reads a version 1 body, or the JSON of binaries before it. An intent without
// entries has nil Entries, whichever form it came in.
func decodeIntent(b []byte) (intent, error) {
	var in intent
	switch {
	case len(b) == 0:
		return intent{}, fmt.Errorf("%w: empty", errBadIntent)
	case b[0] == '{':
		if err := json.Unmarshal(b, &in); err != nil {
			return intent{}, fmt.Errorf("%w: json: %w", errBadIntent, err)
		}
	case b[0] == intentVersion:
		r := intentReader{b: b[1:]}
		in = r.intent()
		if r.err == nil && len(r.b) != 0 {
			r.err = fmt.Errorf("%d trailing bytes", len(r.b))
		}
		if r.err != nil {
			return intent{}, fmt.Errorf("%w: %w", errBadIntent, r.err)
		}
	default:
		return intent{}, fmt.Errorf("%w: version %d, this binary reads version %d (and JSON)", errBadIntent, b[0], intentVersion)
	}
	if len(in.Entries) == 0 {
		in.Entries = nil
	}
	return in, nil
}

// intentReader reads fields with a sticky error: after the first failure err keeps the first
// cause and nothing more is consumed (what the reads return then is never used).
type intentReader struct {
	b   []byte
	err error
}

func (r *intentReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *intentReader) intent() intent {
	in := intent{Node: r.str("node")}
	n := r.uvarint("entry count")
	if r.err == nil && n > uint64(len(r.b)/minIntentEntry) {
		r.fail("entry count %d does not fit in %d bytes", n, len(r.b))
	}
	if r.err != nil || n == 0 {
		return in
	}
	in.Entries = make([]intentEntry, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		in.Entries = append(in.Entries, intentEntry{
			Key:    r.str("key"),
			Bucket: r.u32("bucket"),
			Offset: r.varint("offset"),
			Length: r.varint("length"),
			Size:   r.u32("size"),
			Sum:    r.u64("sum"),
			Gen:    r.uvarint("gen"),
		})
	}
	return in
}

func (r *intentReader) uvarint(what string) uint64 {
	v, n := binary.Uvarint(r.b)
	r.skip(what, n)
	return v
}

func (r *intentReader) varint(what string) int64 {
	v, n := binary.Varint(r.b)
	r.skip(what, n)
	return v
}

// skip consumes a varint of n bytes (n <= 0: binary.Uvarint's truncated or overflowing).
func (r *intentReader) skip(what string, n int) {
	if n <= 0 {
		r.fail("reading %s: truncated or overflowing varint", what)
	} else if r.err == nil {
		r.b = r.b[n:]
	}
}

func (r *intentReader) u32(what string) uint32 {
	v := r.uvarint(what)
	if v > math.MaxUint32 {
		r.fail("%s %d overflows uint32", what, v)
		return 0
	}
	return uint32(v)
}

func (r *intentReader) u64(what string) uint64 {
	if r.err == nil && len(r.b) < 8 {
		r.fail("reading %s: %d bytes left, need 8", what, len(r.b))
	}
	if r.err != nil {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *intentReader) str(what string) string {
	n := r.uvarint(what + " length")
	if r.err == nil && n > uint64(len(r.b)) {
		r.fail("%s length %d exceeds %d bytes left", what, n, len(r.b))
	}
	if r.err != nil {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// commitCmd is the COMMIT command (fsm.EncodeCommit) of the intent's entries under txn id.
func (in intent) commitCmd(id fsm.TxnID) []byte {
	entries := make([]fsm.Entry, len(in.Entries))
	for i, e := range in.Entries {
		entries[i] = e.fsmEntry()
	}
	return fsm.EncodeCommit(fsm.Commit{TxnID: id, Node: in.Node, Entries: entries})
}
