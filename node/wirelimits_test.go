package node

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/wire"
)

// The message limit of internal/wire against the messages the packages above it encode
// (internal/wire may import none of them).

// The client sizes its messages for the longest key any member accepts: the bucket record's.
func TestMaxKeyBytesIsTheRecordLimit(t *testing.T) {
	for name, limit := range map[string]int{"bucketstore.MaxKeyLen": bucketstore.MaxKeyLen, "fsm.MaxKeyLen": fsm.MaxKeyLen} {
		if limit != wire.MaxKeyBytes {
			t.Errorf("%s is %d, wire.MaxKeyBytes %d: they must agree", name, limit, wire.MaxKeyBytes)
		}
	}
}

// largestMessages returns the largest message of every kind a call of n keys of k bytes
// carries, on the client API and between members, each field at its longest encoding.
func largestMessages(n, k int) map[string]proto.Message {
	id := kvoffload.TxnID{1}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = strings.Repeat("k", k)
	}
	reason := wire.Reason(strings.Repeat("r", 2*wire.MaxReasonBytes))
	owner := strings.Repeat("o", wire.MaxNodeIDBytes)
	chunk := make([]byte, wire.ChunkBytes)
	region := &pb.RegionRef{Id: id[:], Token: id[:]}
	offload := &pb.OffloadResponse{}
	precheck := &pb.PrecheckRequest{TxnId: id[:]}
	descs := make([]*pb.Desc, n)
	local := &pb.LocalGetResponse{}
	var entries []fsm.Entry
	var kg []fsm.KeyGen
	result := &fsm.Result{TxnID: id, Type: fsm.CmdCommit, Index: math.MaxUint64}
	for i, key := range keys {
		offload.Results = append(offload.Results, &pb.KeyResult{Key: key, Outcome: math.MaxInt32, Joined: true, Reason: reason, Code: math.MaxInt32})
		precheck.Keys = append(precheck.Keys, &pb.PrecheckKey{Key: key, Size: math.MaxUint64, Sum: math.MaxUint64})
		descs[i] = &pb.Desc{Key: key, Offset: math.MaxUint64, Length: math.MaxUint64}
		local.Results = append(local.Results, &pb.LocalGetResult{Status: math.MaxInt32, Reason: reason, Size: math.MaxUint64, Code: math.MaxInt32})
		e := fsm.Entry{Key: key, Owner: owner, Size: math.MaxUint32, Sum: math.MaxUint64, Gen: math.MaxUint64, TxnID: id,
			Extent: fsm.Extent{Bucket: math.MaxUint32, Offset: math.MinInt64, Length: math.MinInt64}}
		entries, kg = append(entries, e), append(kg, fsm.KeyGen{Key: key, Gen: math.MaxUint64})
		result.Keys = append(result.Keys, fsm.KeyOutcome{Key: key, Outcome: fsm.OutcomeStored, Entry: e, Shared: true})
	}
	return map[string]proto.Message{
		"OffloadChunk":          &pb.OffloadChunk{TxnId: id[:], Key: strings.Repeat("k", k), Size: math.MaxUint64, Data: chunk},
		"OffloadResponse":       offload,
		"PrecheckRequest":       precheck,
		"PrecheckResponse":      &pb.PrecheckResponse{Stored: make([]bool, n)},
		"GetRequest":            &pb.GetRequest{Keys: keys},
		"GetChunk":              &pb.GetChunk{Index: math.MaxUint32, Status: math.MaxInt32, Reason: reason, Size: math.MaxUint64, Data: chunk, Code: math.MaxInt32},
		"ExistsRequest":         &pb.ExistsRequest{Keys: keys, LeaseMs: math.MaxUint32},
		"ExistsResponse":        &pb.ExistsResponse{Keys: make([]pb.Presence, n), PrefixPresent: math.MaxUint32, Reason: reason},
		"RemoveRequest":         &pb.RemoveRequest{Keys: keys, TxnId: id[:]},
		"RemoveResponse":        &pb.RemoveResponse{Removed: make([]bool, n)},
		"LocalOffloadRequest":   &pb.LocalOffloadRequest{TxnId: id[:], Region: region, Objects: descs},
		"LocalGetRequest":       &pb.LocalGetRequest{Region: region, Keys: descs},
		"LocalGetResponse":      local,
		"ProposeRequest/commit": &pb.ProposeRequest{Command: fsm.EncodeCommit(fsm.Commit{TxnID: id, Node: owner, Entries: entries})},
		"ProposeRequest/remove": &pb.ProposeRequest{Command: fsm.EncodeRemove(fsm.Remove{TxnID: id, Keys: kg, Reason: reason})},
		"ProposeResponse":       &pb.ProposeResponse{Result: fsm.EncodeResult(result)},
	}
}

// Every message of a call at the limits fits wire.MaxMessageBytes, whichever limit dominates: long
// keys (a forwarded result holds each twice), short keys (the reasons), one key (the chunk).
func TestMaxMessageBytesBoundsEveryMessage(t *testing.T) {
	for _, lim := range []struct{ keys, keyBytes int }{{4096, wire.MaxKeyBytes}, {4096, 1}, {1, wire.MaxKeyBytes}, {300, 17}} {
		limit := wire.MaxMessageBytes(lim.keys, lim.keyBytes)
		for name, m := range largestMessages(lim.keys, lim.keyBytes) {
			if size := proto.Size(m); size > limit {
				t.Errorf("%d keys of %d bytes: %s of %d bytes exceeds wire.MaxMessageBytes %d", lim.keys, lim.keyBytes, name, size, limit)
			}
		}
	}
	if got := wire.MaxMessageBytes(math.MaxInt, wire.MaxKeyBytes); got != math.MaxInt32 {
		t.Fatalf("wire.MaxMessageBytes of absurd limits = %d, want math.MaxInt32", got)
	}
}
