// Package wire converts between the Store's types (package kvoffload) and the protocol's
// messages (api/kvoffload/v1): the one converter at the API edge, used by the node's gRPC
// services and by the Go client alike.
//
// The enumerations have the same numbers on both sides (kvoffload.Outcome and pb.Outcome,
// GetStatus, Presence, Code), so a value converts by number; what a receiver does with a
// number it does not know is decided here, once: an unknown outcome is Failed, an unknown
// status Unavailable, an unknown presence Unknown (never "not stored"), an unknown code itself.
package wire

import (
	"fmt"
	"math"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// KeyResultToPB is the wire form of r, its Reason cut to MaxReasonBytes.
func KeyResultToPB(r kvoffload.KeyResult) *pb.KeyResult {
	return &pb.KeyResult{Key: r.Key, Outcome: pb.Outcome(r.Outcome), Joined: r.Joined, Reason: Reason(r.Reason), Code: pb.Code(r.Code)}
}

// KeyResultFromPB reads a result for key. An outcome this build does not know is Failed with
// CodeInternal, its number in the Reason. The code is normalized (CodeFromPB): a stored key
// has CodeNone, a key that is not stored never has (a member that predates codes, or a broken
// one, gets CodeInternal).
func KeyResultFromPB(r *pb.KeyResult, key string) kvoffload.KeyResult {
	out := kvoffload.KeyResult{Key: key, Outcome: kvoffload.Outcome(r.GetOutcome()), Joined: r.GetJoined(),
		Code: CodeFromPB(r.GetCode()), Reason: r.GetReason()}
	switch out.Outcome {
	case kvoffload.Stored, kvoffload.AlreadyStored:
		out.Code = kvoffload.CodeNone
	case kvoffload.Conflict, kvoffload.Rejected, kvoffload.Failed:
		if out.Code == kvoffload.CodeNone {
			out.Code = kvoffload.CodeInternal
		}
	default:
		out.Outcome, out.Code = kvoffload.Failed, kvoffload.CodeInternal
		out.Reason = fmt.Sprintf("unknown outcome %d from the member: %s", r.GetOutcome(), r.GetReason())
	}
	return out
}

// CodeFromPB reads a code. A number a kvoffload.Code cannot hold (negative, or over 255) is
// CodeInternal rather than a truncation that would read as another code; a number this build
// does not name but Code holds reads as itself.
func CodeFromPB(c pb.Code) kvoffload.Code {
	if c < 0 || c > math.MaxUint8 {
		return kvoffload.CodeInternal
	}
	return kvoffload.Code(c)
}

// StatusToPB is the wire form of s. ShortBuffer never travels (the receiver decides it); any
// status the protocol does not have is sent as Unavailable.
func StatusToPB(s kvoffload.GetStatus) pb.GetStatus {
	switch s {
	case kvoffload.Found, kvoffload.NotFound, kvoffload.Corrupt, kvoffload.Unavailable, kvoffload.InvalidKey:
		return pb.GetStatus(s)
	}
	return pb.GetStatus_GET_STATUS_UNAVAILABLE
}

// StatusFromPB reads a status; ok is false for one this build does not know (or
// UNSPECIFIED), which the caller reports Unavailable.
func StatusFromPB(s pb.GetStatus) (status kvoffload.GetStatus, ok bool) {
	switch st := kvoffload.GetStatus(s); st {
	case kvoffload.Found, kvoffload.NotFound, kvoffload.Corrupt, kvoffload.Unavailable, kvoffload.InvalidKey:
		return st, true
	}
	return kvoffload.Unavailable, false
}

// PresenceToPB is the wire form of p; a presence the protocol does not have is sent as
// Unknown, which claims neither "stored" nor "not stored".
func PresenceToPB(p kvoffload.Presence) pb.Presence {
	switch p {
	case kvoffload.Present, kvoffload.Absent, kvoffload.InFlight:
		return pb.Presence(p)
	}
	return pb.Presence_PRESENCE_UNKNOWN
}

// PresenceFromPB reads a presence; one this build does not know is Unknown.
func PresenceFromPB(p pb.Presence) kvoffload.Presence {
	switch pr := kvoffload.Presence(p); pr {
	case kvoffload.Present, kvoffload.Absent, kvoffload.InFlight:
		return pr
	}
	return kvoffload.Unknown
}

// StatsToPB is the wire form of s.
func StatsToPB(s kvoffload.Stats) *pb.StatsResponse {
	return &pb.StatsResponse{NodeId: s.NodeID, Keys: s.Keys, Bytes: s.Bytes, LocalKeys: s.LocalKeys,
		LocalBytes: s.LocalBytes, LiveBytes: s.LiveBytes, AllocatedBytes: s.AllocatedBytes, Counters: s.Counters}
}

// StatsFromPB reads a StatsResponse.
func StatsFromPB(s *pb.StatsResponse) kvoffload.Stats {
	return kvoffload.Stats{NodeID: s.GetNodeId(), Keys: s.GetKeys(), Bytes: s.GetBytes(), LocalKeys: s.GetLocalKeys(),
		LocalBytes: s.GetLocalBytes(), LiveBytes: s.GetLiveBytes(), AllocatedBytes: s.GetAllocatedBytes(), Counters: s.GetCounters()}
}

// RefusingHeader is the response header of Status (on the client API) that says why the
// answering node refuses offloads and reads: it was removed from the cluster, or it
// fail-stopped (the error's text). It is absent while the node serves. A binary header
// ("-bin"), so any error text travels as it is.
const RefusingHeader = "kvoffload-refusing-bin"

// ChunkBytes is the largest data field sent in one GetChunk or OffloadChunk (1 MiB, the
// protocol's chunk size).
const ChunkBytes = 1 << 20

// SendGets streams res as GetChunk messages (SendGet for each, in order).
func SendGets(send func(*pb.GetChunk) error, res []kvoffload.GetResult) error {
	for i, r := range res {
		if err := SendGet(send, i, r); err != nil {
			return err
		}
	}
	return nil
}

// SendGet streams the result at position i: its first chunk carries the index, status, code
// and reason (cut to MaxReasonBytes; and size when Found); the value follows in chunks of at
// most ChunkBytes. A value of one chunk is sent from its own bytes. A longer one is sent from
// a copy of each chunk: gRPC keeps the data of a message it could not send yet until the
// client reads it or the connection closes, and a chunk aliasing the value would keep the
// whole value (up to 64 MiB) for a client that stopped reading, outside the node's buffer
// budget (40 streams that never read would hold 163 MiB). So a stream holds at most about a
// chunk that way (TestSendGetChunksDoNotPinLongValues).
func SendGet(send func(*pb.GetChunk) error, i int, r kvoffload.GetResult) error {
	first := &pb.GetChunk{Index: uint32(i), Status: StatusToPB(r.Status), Reason: Reason(r.Reason), Code: pb.Code(r.Code)}
	var val []byte
	if r.Status == kvoffload.Found {
		first.Size, val = uint64(len(r.Value)), r.Value
	}
	chunk := func(n int) []byte {
		if len(r.Value) <= ChunkBytes {
			return val[:n]
		}
		return append([]byte(nil), val[:n]...)
	}
	n := min(len(val), ChunkBytes)
	first.Data, val = chunk(n), val[n:]
	if err := send(first); err != nil {
		return err
	}
	for len(val) > 0 {
		n := min(len(val), ChunkBytes)
		if err := send(&pb.GetChunk{Index: uint32(i), Data: chunk(n)}); err != nil {
			return err
		}
		val = val[n:]
	}
	return nil
}
