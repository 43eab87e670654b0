package node

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/txn"
)

const (
	// chunkBytes is the largest data field this node sends in one message.
	chunkBytes = 1 << 20
	// maxMsgBytes bounds one gRPC message (a chunk plus its envelope).
	maxMsgBytes = chunkBytes + 1<<20
)

func toPBOutcome(o txn.Outcome) pb.Outcome {
	switch o {
	case txn.Stored:
		return pb.Outcome_OUTCOME_STORED
	case txn.AlreadyStored:
		return pb.Outcome_OUTCOME_ALREADY_STORED
	case txn.Conflict:
		return pb.Outcome_OUTCOME_CONFLICT
	case txn.Rejected:
		return pb.Outcome_OUTCOME_REJECTED
	case txn.Failed:
		return pb.Outcome_OUTCOME_FAILED
	}
	return pb.Outcome_OUTCOME_UNSPECIFIED
}

func toPBStatus(s txn.GetStatus) pb.GetStatus {
	switch s {
	case txn.Found:
		return pb.GetStatus_GET_STATUS_FOUND
	case txn.NotFound:
		return pb.GetStatus_GET_STATUS_NOT_FOUND
	case txn.Corrupt:
		return pb.GetStatus_GET_STATUS_CORRUPT
	}
	return pb.GetStatus_GET_STATUS_UNAVAILABLE
}

func fromPBStatus(s pb.GetStatus) txn.GetStatus {
	switch s {
	case pb.GetStatus_GET_STATUS_FOUND:
		return txn.Found
	case pb.GetStatus_GET_STATUS_NOT_FOUND:
		return txn.NotFound
	case pb.GetStatus_GET_STATUS_CORRUPT:
		return txn.Corrupt
	}
	return txn.Unavailable
}

func toPBPresence(p txn.Presence) pb.Presence {
	switch p {
	case txn.Present:
		return pb.Presence_PRESENCE_PRESENT
	case txn.InFlight:
		return pb.Presence_PRESENCE_IN_FLIGHT
	case txn.Absent:
		return pb.Presence_PRESENCE_ABSENT
	}
	// Unknown, and any presence this build does not know: never claim "not stored".
	return pb.Presence_PRESENCE_UNKNOWN
}

// grpcError maps coordinator errors onto gRPC status codes the client understands:
// ResourceExhausted and InvalidArgument are final, Unavailable may be retried elsewhere.
func grpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, txn.ErrBatchTooLarge):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, txn.ErrTxnIDInUse):
		return status.Error(codes.FailedPrecondition, err.Error()) // final: a retry cannot succeed
	case errors.Is(err, txn.ErrFailed), errors.Is(err, txn.ErrClosed), errors.Is(err, txn.ErrIndeterminate):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// sendGets streams results as GetChunk messages: each key's first chunk carries its index,
// status and size; its value follows in chunks of at most chunkBytes.
func sendGets(send func(*pb.GetChunk) error, res []txn.GetResult) error {
	for i, r := range res {
		first := &pb.GetChunk{Index: uint32(i), Status: toPBStatus(r.Status), Reason: r.Reason}
		if r.Status == txn.Found {
			first.Size = uint64(len(r.Value))
		}
		val := r.Value
		n := min(len(val), chunkBytes)
		first.Data, val = val[:n], val[n:]
		if err := send(first); err != nil {
			return err
		}
		for len(val) > 0 {
			n := min(len(val), chunkBytes)
			if err := send(&pb.GetChunk{Index: uint32(i), Data: val[:n]}); err != nil {
				return err
			}
			val = val[n:]
		}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(format, args...))
}
