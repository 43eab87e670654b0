package wire

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A refusal is a member's answer that it serves no call of the API until an operator acts:
// gRPC Unavailable carrying a google.rpc.ErrorInfo of ErrorDomain with one of the reasons
// below (AIP-193). It is final for that member: a client never sends the same call to it
// again, and moves to another member when it knows one. Nothing of the refused call was done.
const (
	// ErrorDomain is the ErrorInfo domain of the client API's refusals.
	ErrorDomain = "kvoffload.v1.KVOffload"
	// ReasonFailStopped: the member's WAL or a bucket could not be written or synced; it
	// accepts nothing more until its process restarts (docs/design.md, "Fail-stop").
	ReasonFailStopped = "FAIL_STOPPED"
	// ReasonRemoved: the member was removed from the cluster while it ran.
	ReasonRemoved = "NODE_REMOVED"
)

// Refusal is the status of a refusal for reason, with msg as its message.
func Refusal(reason, msg string) error {
	st := status.New(codes.Unavailable, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// RefusalReason is the reason of err when it is a refusal (Refusal), else "".
func RefusalReason(err error) string {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			return info.Reason
		}
	}
	return ""
}
