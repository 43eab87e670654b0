package txn

import (
	"encoding/json"
	"fmt"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
)

// intent is the payload of a WAL INTENT record: everything recovery needs to verify the
// transaction's records and re-propose its COMMIT. JSON keeps it inspectable; it is small
// next to the data it describes.
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

func (in intent) encode() []byte {
	b, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Sprintf("txn: encoding intent: %v", err)) // plain structs always encode
	}
	return b
}

func decodeIntent(b []byte) (intent, error) {
	var in intent
	if err := json.Unmarshal(b, &in); err != nil {
		return in, fmt.Errorf("txn: decoding intent: %w", err)
	}
	return in, nil
}

func (in intent) commit(id fsm.TxnID) []byte {
	entries := make([]fsm.Entry, len(in.Entries))
	for i, e := range in.Entries {
		entries[i] = e.fsmEntry()
	}
	return fsm.EncodeCommit(fsm.Commit{TxnID: id, Node: in.Node, Entries: entries})
}
