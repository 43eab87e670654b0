package forward

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Only the leader's PermissionDenied carrying the NOT_A_MEMBER ErrorInfo means this node was
// removed: another refusal (a certificate that is not the caller's, an operator call) or the
// same detail on another code must not make a member refuse every call.
func TestNotAMember(t *testing.T) {
	with := func(c codes.Code, info *errdetails.ErrorInfo) error {
		st := status.New(c, "refused")
		if info != nil {
			d, err := st.WithDetails(info)
			if err != nil {
				t.Fatal(err)
			}
			st = d
		}
		return st.Err()
	}
	member := &errdetails.ErrorInfo{Reason: ReasonNotAMember, Domain: ErrorDomain}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{with(codes.PermissionDenied, member), true},
		{with(codes.PermissionDenied, nil), false},
		{with(codes.PermissionDenied, &errdetails.ErrorInfo{Reason: ReasonNotAMember, Domain: "elsewhere"}), false},
		{with(codes.PermissionDenied, &errdetails.ErrorInfo{Reason: "OTHER", Domain: ErrorDomain}), false},
		{with(codes.Unavailable, member), false},
		{errors.New("not a status"), false},
		{nil, false},
	} {
		if got := notAMember(c.err); got != c.want {
			t.Errorf("notAMember(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestReadDeadline: a read of many keys from a responsive owner gets time for each key, and a
// suspect owner's miss stays fast whatever the number of keys (chaos/cluster_test.go relies
// on misses under 100 ms for small batches).
func TestReadDeadline(t *testing.T) {
	if d := readDeadline(false, 4096, 4096*64); d < ownerReadBase+time.Second {
		t.Errorf("4,096 keys from a responsive owner: %v, want at least %v", d, ownerReadBase+time.Second)
	}
	if d := readDeadline(true, 4096, 4096*64); d >= 100*time.Millisecond {
		t.Errorf("4,096 small keys from a suspect owner: %v, want under 100 ms", d)
	}
	if d := readDeadline(true, 4096, 16<<20); d >= 300*time.Millisecond {
		t.Errorf("16 MiB from a suspect owner: %v, want under 300 ms", d)
	}
}
