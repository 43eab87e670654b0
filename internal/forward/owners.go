package forward

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/wire"
)

// Deadlines of a read from the member that owns the keys' bytes.
const (
	// ownerReadBase is the part of a forwarded read's deadline that does not depend on its
	// size. A dead owner is a fast miss anyway (its port refuses the connection at once);
	// the deadline matters for an owner that is alive but does not answer (paused,
	// partitioned), and must not fail a busy owner.
	ownerReadBase = time.Second
	// suspectReadBase replaces ownerReadBase for an owner whose last read timed out, for
	// suspectFor: an unresponsive owner costs one slow miss, then fast ones (under 100 ms,
	// chaos/cluster_test.go).
	suspectReadBase = 75 * time.Millisecond
	suspectFor      = 5 * time.Second
	// ownerReadRate is the transfer rate (bytes/s) the rest of the deadline assumes.
	ownerReadRate = 100 << 20
	// ownerReadPerKey is the deadline's allowance per key: each is a record read, verified
	// and framed on its own, so a batch of many small values costs more than its bytes. A
	// batch at MaxBatchKeys must be read whole within its deadline
	// (TestEveryLimitAtItsValueForwarded, TestReadDeadline).
	ownerReadPerKey = 250 * time.Microsecond
)

// readDeadline is the deadline of reading n keys, size bytes together, from an owner; a
// suspect one (its last read timed out) gets no allowance per key, so that its misses stay
// fast.
func readDeadline(suspect bool, n int, size int64) time.Duration {
	d := ownerReadBase + time.Duration(n)*ownerReadPerKey
	if suspect {
		d = suspectReadBase
	}
	return d + time.Duration(size)*time.Second/ownerReadRate
}

// Owners reads keys from the member that owns their bytes (txn.Remote), over its Cluster
// service's ReadLocal, and remembers which owners recently failed to answer in time.
type Owners struct {
	f       *fsm.FSM
	peers   *Peers
	mu      sync.Mutex
	suspect map[string]time.Time // owner -> until when its reads get the short deadline
}

// NewOwners returns the reader of other members' keys: f names their owners and peer
// addresses, peers dials them.
func NewOwners(f *fsm.FSM, peers *Peers) *Owners {
	return &Owners{f: f, peers: peers, suspect: map[string]time.Time{}}
}

// suspected reports whether owner's last read timed out less than suspectFor ago.
func (r *Owners) suspected(owner string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Now().Before(r.suspect[owner])
}

// noteRead records whether owner answered in time.
func (r *Owners) noteRead(owner string, timedOut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if timedOut {
		r.suspect[owner] = time.Now().Add(suspectFor)
	} else {
		delete(r.suspect, owner)
	}
}

// ReadRemote reads keys, size bytes together, from owner; a key it cannot read is
// Unavailable.
func (r *Owners) ReadRemote(ctx context.Context, owner string, keys []string, size int64) []kvoffload.GetResult {
	fail := func(reason string) []kvoffload.GetResult {
		out := make([]kvoffload.GetResult, len(keys))
		for i, k := range keys {
			out[i] = kvoffload.GetResult{Key: k, Status: kvoffload.Unavailable, Reason: reason}
		}
		return out
	}
	mem, ok := r.f.Member(owner)
	if !ok || mem.PeerTarget() == "" {
		return fail("owner " + owner + " is not a known member")
	}
	cl, err := r.peers.Member(owner, mem.PeerTarget())
	if err != nil {
		return fail(err.Error())
	}
	rctx, cancel := context.WithTimeout(ctx, readDeadline(r.suspected(owner), len(keys), size))
	defer cancel()
	stream, err := cl.ReadLocal(rctx, &pb.GetRequest{Keys: keys})
	var out []kvoffload.GetResult
	if err == nil {
		// No value can be longer than all of them together, as this node's metadata sizes them:
		// a peer announcing more is refused before anything is buffered.
		out, err = wire.Collect(stream.Recv, keys, nil, uint64(max(size, 0)))
	}
	if ctx.Err() == nil {
		r.noteRead(owner, status.Code(err) == codes.DeadlineExceeded)
	}
	if err != nil {
		return fail(fmt.Sprintf("owner %s unavailable: %v", owner, err))
	}
	return out
}
