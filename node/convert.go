package node

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload/internal/wire"
	"github.com/kvoffload/kvoffload/txn"
)

// maxMsgBytes is the message limit, in bytes, of a node with the limits lim: of its gRPC
// servers (the API, the local socket, the peer service) and its connections to peers. It is
// the largest message a call within lim needs (wire.MaxMessageBytes), so every request and
// answer of a batch at the limits fits, on every transport.
func maxMsgBytes(lim txn.Config) int {
	return wire.MaxMessageBytes(lim.MaxBatchKeys, lim.MaxKeyBytes)
}

// grpcError maps coordinator errors onto gRPC status codes the client understands:
// ResourceExhausted and InvalidArgument are final, Unavailable may be retried elsewhere, and
// a fail-stop or removal is a refusal (wire.Refusal): final for this member.
func grpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, txn.ErrBatchTooLarge):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, txn.ErrTxnIDInUse):
		return status.Error(codes.FailedPrecondition, err.Error()) // final: a retry cannot succeed
	case errors.Is(err, txn.ErrFailed):
		return wire.Refusal(wire.ReasonFailStopped, err.Error())
	case errors.Is(err, txn.ErrRemoved):
		return wire.Refusal(wire.ReasonRemoved, err.Error())
	case errors.Is(err, txn.ErrClosed), errors.Is(err, txn.ErrIndeterminate):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func invalid(format string, args ...any) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(format, args...))
}
