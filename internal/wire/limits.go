package wire

import (
	"math"
	"unicode/utf8"
)

// MaxKeyBytes is the longest key any member accepts, in bytes: the most txn.Config's
// MaxKeyBytes may be (bucketstore.MaxKeyLen, the bucket record's key field). A client, which
// does not know the members' own limit, sizes its messages for keys of this length.
const MaxKeyBytes = 1024

// MaxNodeIDBytes is the longest node ID, in bytes (node.Config.Validate): an ID travels with
// every key of a forwarded proposal's result, as the key's owner.
const MaxNodeIDBytes = 255

// MaxReasonBytes is the most bytes of a per-key Reason a message carries (Reason), so that a
// batch's answer has a size bound whatever its errors say.
const MaxReasonBytes = 1024

// What one key adds to a message besides its key bytes, in bytes, counted generously (each
// varint at its longest, each length prefix at 3 bytes):
//
//   - answerFieldBytes: the fields around a key and its Reason in a client API message: a
//     KeyResult's entry, key, outcome, joined and code (OffloadResponse), a LocalGetResult's
//     status, size and code, a Desc's offset and length (LocalOffloadRequest, LocalGetRequest),
//     a PrecheckKey's size and checksum, a GetRequest's entry.
//   - forwardedFieldBytes: the fields around a key that a forwarded proposal's result holds
//     twice (the outcome's key and its entry's, fsm.EncodeResult): outcome, shared, bucket,
//     offset, length, size, checksum, generation, owner (a node ID) and txn ID; it bounds the
//     proposal's command too (fsm.EncodeCommit, fsm.EncodeRemove: a key and its entry once).
const (
	answerFieldBytes    = 64
	forwardedFieldBytes = 128 + MaxNodeIDBytes
)

// messageSlackBytes is what a message holds besides its keys' share and one chunk of value
// bytes: the txn ID, a region reference, a call-level Reason, the protobuf framing of it all.
const messageSlackBytes = 1 << 20

// MaxMessageBytes is the largest gRPC message, in bytes, that a call within the limits of a
// batch of maxBatchKeys keys of at most maxKeyBytes bytes each may need, on any transport:
// the client API over TCP and the local socket (requests and answers of BatchOffload,
// Precheck, BatchGet, BatchExists, Remove and the local path's Offload and Get) and the peer
// connections (a forwarded proposal and its result, ReadLocal). It is the most any one key
// adds to a message, times maxBatchKeys, plus one chunk (ChunkBytes) and messageSlackBytes:
// a value travels in chunks, so no value or batch size enters it. It is the one message
// limit of the node's servers, its peer connections and the Go client, each sized from the
// limits it knows (the node from its txn.Config, the client from Options.MaxBatchKeys and
// MaxKeyBytes). It saturates at math.MaxInt32 (gRPC's own ceiling) for absurd limits.
func MaxMessageBytes(maxBatchKeys, maxKeyBytes int) int {
	perKey := max(2*maxKeyBytes+forwardedFieldBytes, maxKeyBytes+MaxReasonBytes+answerFieldBytes)
	fixed := ChunkBytes + messageSlackBytes
	if maxBatchKeys < 0 || maxBatchKeys > (math.MaxInt32-fixed)/perKey {
		return math.MaxInt32
	}
	return maxBatchKeys*perKey + fixed
}

// Reason is s as a message carries it: whole when it has at most MaxReasonBytes bytes, else
// cut at a character boundary to fit with a trailing "...".
func Reason(s string) string {
	if len(s) <= MaxReasonBytes {
		return s
	}
	const more = "..."
	cut := MaxReasonBytes - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}
