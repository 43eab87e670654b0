package client

import (
	"errors"
	"testing"

	"github.com/kvoffload/kvoffload"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A request gRPC could not encode (the status grpc-go's rpc_util.go gives a marshal failure,
// such as a string field that is not UTF-8) left nothing on the wire: it is refused at once,
// never retried until the deadline. Other Internal and Unknown errors leave the outcome
// unknown and are retried.
func TestUnsendableIsPermanent(t *testing.T) {
	marshal := status.Error(codes.Internal, "grpc: error while marshaling: string field contains invalid UTF-8")
	if retryable(marshal) {
		t.Fatal("a marshal failure is retryable")
	}
	if err := permanent("BatchOffload", marshal); !errors.Is(err, kvoffload.ErrInvalidArgument) || status.Code(err) != codes.Internal {
		t.Fatalf("permanent: %v, want kvoffload.ErrInvalidArgument wrapping Internal", err)
	}
	for _, err := range []error{
		status.Error(codes.Internal, "txn: something broke"),
		status.Error(codes.Unknown, "grpc: error while marshaling: not from this client"),
		status.Error(codes.Internal, "grpc: failed to unmarshal the received message"), // maybe after a commit
	} {
		if !retryable(err) {
			t.Errorf("%v: not retryable", err)
		}
	}
}
