// Package forward carries a cluster member's metadata calls to the Raft leader. Only the
// leader can append a command, run a barrier or give a read index; a follower's coordinator
// makes the same calls (txn.Meta) and Leader sends them on, over the leader's Cluster service
// (internal/cluster/service.go), then waits until this node has applied what the leader did,
// so the local metadata shows it on return. Owners reads keys from the members that own
// their bytes (owners.go).
//
// Errors keep their meaning across the hop: a leader that moved between lookup and call
// answers FailedPrecondition and the leader is looked up again; a forwarded proposal the
// leader refuses (PermissionDenied: this node is outside the configuration) is txn.ErrRefused;
// any other failure of a forwarded proposal is raftmeta.ErrIndeterminate, because the leader
// may have applied it before the reply was lost.
//
// A forwarded call lasts only while this node's Raft follows the leader it was sent to. Raft's
// heartbeats are the leader's keepalive: a follower that has not heard from the leader for
// its heartbeat timeout (0.5 to 1 s by default) drops it, as it does a leader that was
// deposed, and the call is then abandoned and sent again to the next leader, so a frozen
// leader (SIGSTOP: its connections open, nothing answers) costs a forwarded call the
// failover, not the caller's deadline. Sending a proposal again is safe: the FSM applies a
// command once per txn ID and answers a repeat with the recorded result (fsm.FSM.TxnResult).
package forward

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/raftmeta"
	"github.com/kvoffload/kvoffload/txn"
)

// leaderWait bounds how long a forwarded call waits for a leader to be known.
const leaderWait = 10 * time.Second

// leaderPoll is how often this node's Raft is asked for the leader: while waiting for one to
// be known, and during a forwarded call, to abandon it once the leader is another.
const leaderPoll = 20 * time.Millisecond

// errLeaderLeft is the error of a forwarded call abandoned because this node's Raft stopped
// following the leader it was sent to (deposed, or not heard from for a heartbeat timeout).
var errLeaderLeft = errors.New("node: this node no longer follows the leader the call was sent to")

// Leader forwards to the Raft leader the calls only the leader can answer.
type Leader struct {
	raft      *raftmeta.Node
	fsm       *fsm.FSM // the member directory: the leader's peer address
	peers     *Peers
	id        string          // this node's ID
	onRemoved func(why error) // OnRemoved's
	readIndex *sharedIndex    // the read index requests, shared among concurrent callers
}

// ErrorDomain and ReasonNotAMember are the google.rpc.ErrorInfo the leader attaches to its
// PermissionDenied for a node outside the Raft configuration (internal/cluster/service.go
// refuseNonMember): the one refusal that means this node was removed.
const (
	ErrorDomain      = "kvoffload.v1.Cluster" // the service that answers it
	ReasonNotAMember = "NOT_A_MEMBER"
)

// OnRemoved installs fn, called (possibly more than once, from any goroutine) with the
// leader's refusal when the leader answers a forwarded call that this node is not in the
// cluster configuration. Call before the node serves.
func (l *Leader) OnRemoved(fn func(why error)) { l.onRemoved = fn }

// notAMember reports whether err is the leader's refusal of a node outside the configuration.
func notAMember(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.PermissionDenied {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain && info.Reason == ReasonNotAMember {
			return true
		}
	}
	return false
}

// NewLeader returns the forwarder of node id, which finds the leader's peer address in the
// member directory of f and reaches it through peers.
func NewLeader(r *raftmeta.Node, f *fsm.FSM, peers *Peers, id string) *Leader {
	l := &Leader{raft: r, fsm: f, peers: peers, id: id}
	l.readIndex = &sharedIndex{fetch: l.fetchReadIndex}
	return l
}

// Propose appends cmd on the leader. A forwarded proposal returns only once this node has
// applied the command too: the coordinator releases its in-flight keys on return, and they
// must then be visible here (single-flight, read-your-writes on the node that offloaded).
func (l *Leader) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	var res *fsm.Result
	var resp *pb.ProposeResponse
	forwarded, err := l.forward(ctx,
		func() (err error) { res, err = l.raft.Propose(ctx, cmd); return err },
		func(ctx context.Context, cl pb.ClusterClient) (err error) {
			resp, err = cl.Propose(ctx, &pb.ProposeRequest{Command: cmd})
			return err
		})
	switch {
	case !forwarded && err != nil:
		return nil, err
	case !forwarded:
		return res, nil
	case status.Code(err) == codes.PermissionDenied:
		// A definite refusal (this node is outside the configuration): no retry helps.
		return nil, fmt.Errorf("%w: forwarded proposal: %w", txn.ErrRefused, err)
	case err != nil:
		return nil, fmt.Errorf("%w: forwarded proposal: %w", raftmeta.ErrIndeterminate, err)
	}
	r, err := fsm.DecodeResult(resp.Result) // binary, or the JSON of a leader of an earlier binary
	if err != nil {
		return nil, fmt.Errorf("%w: decoding forwarded result: %w", raftmeta.ErrIndeterminate, err)
	}
	if err := l.raft.WaitApplied(ctx, r.Index); err != nil {
		return nil, fmt.Errorf("%w: %w", raftmeta.ErrIndeterminate, err)
	}
	return r, nil
}

// Barrier asks the leader for a barrier and waits until this node has applied at least as
// far as the leader had: intents are resolved only after catch-up (txn/recovery.go).
func (l *Leader) Barrier(ctx context.Context) error {
	var resp *pb.BarrierResponse
	forwarded, err := l.forward(ctx,
		func() error { return l.raft.Barrier(ctx) },
		func(ctx context.Context, cl pb.ClusterClient) (err error) {
			resp, err = cl.Barrier(ctx, &pb.BarrierRequest{})
			return err
		})
	switch {
	case !forwarded:
		return err
	case err != nil:
		return fmt.Errorf("node: forwarded barrier: %w", err)
	}
	return l.raft.WaitApplied(ctx, resp.AppliedIndex)
}

// ReadIndex gets the leader's read index (raftmeta.Node.ReadIndex: heartbeat rounds, no log
// write), then waits until this node has applied it, so the local metadata reflects every
// command acknowledged anywhere before the call. Concurrent callers share one request (local
// or forwarded, see sharedIndex): each gets the answer of a request that started after it
// called, so 8 concurrent callers on a follower cost at most 2 forwarded round trips, not 8.
// A failed request fails every caller that shared it with its error; a caller whose ctx
// ends returns ctx's error and the request goes on for the others.
func (l *Leader) ReadIndex(ctx context.Context) error {
	index, err := l.readIndex.get(ctx)
	if err != nil {
		return err
	}
	return l.raft.WaitApplied(ctx, index)
}

// fetchReadIndex is one read index request: this node's Raft's if it is the leader,
// otherwise forwarded to the leader.
func (l *Leader) fetchReadIndex(ctx context.Context) (uint64, error) {
	var index uint64
	forwarded, err := l.forward(ctx,
		func() (err error) { index, err = l.raft.ReadIndex(ctx); return err },
		func(ctx context.Context, cl pb.ClusterClient) error {
			resp, err := cl.ReadIndex(ctx, &pb.ReadIndexRequest{NodeId: l.id})
			if err == nil {
				index = resp.ReadIndex
			}
			return err
		})
	switch {
	case forwarded && err != nil:
		return 0, fmt.Errorf("node: forwarded read index: %w", err)
	case err != nil:
		return 0, err
	}
	return index, nil
}

// forward runs local, the call on this node's Raft; when that fails with
// raftmeta.ErrNotLeader it runs remote, the same call on the leader's Cluster service (within
// ctx, and only while this node follows that leader: call). While the leader answers
// FailedPrecondition (it moved between lookup and call), or the call is abandoned because this
// node stopped following it, it starts again with local (this node may have become the
// leader). forwarded reports that err, nil or not, is remote's; otherwise it is local's or
// the leader lookup's.
func (l *Leader) forward(ctx context.Context, local func() error, remote func(context.Context, pb.ClusterClient) error) (forwarded bool, err error) {
	for {
		if err := local(); !errors.Is(err, raftmeta.ErrNotLeader) {
			return false, err
		}
		id, cl, err := l.client(ctx)
		if err != nil {
			return false, err
		}
		err = l.call(ctx, id, cl, remote)
		if l.onRemoved != nil && notAMember(err) {
			l.onRemoved(err)
		}
		if status.Code(err) != codes.FailedPrecondition && !errors.Is(err, errLeaderLeft) {
			return true, err
		}
	}
}

// call runs remote on cl, the Cluster client of leader id, under a context that ends with ctx
// or as soon as this node's Raft names a leader other than id (none included); the error of
// a call cut short that way (Canceled) wraps errLeaderLeft.
func (l *Leader) call(ctx context.Context, id string, cl pb.ClusterClient, remote func(context.Context, pb.ClusterClient) error) error {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		t := time.NewTicker(leaderPoll)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
			}
			if now, _ := l.raft.Leader(); now != id {
				cancel(errLeaderLeft)
				return
			}
		}
	}()
	err := remote(cctx, cl)
	if status.Code(err) == codes.Canceled && ctx.Err() == nil && errors.Is(context.Cause(cctx), errLeaderLeft) {
		return fmt.Errorf("%w: leader %s: %w", errLeaderLeft, id, err)
	}
	return err
}

// Client waits, up to leaderWait, until a leader with a known peer address exists and
// returns a client of its Cluster service.
func (l *Leader) Client(ctx context.Context) (pb.ClusterClient, error) {
	_, cl, err := l.client(ctx)
	return cl, err
}

// client is Client, which also returns the leader's ID.
func (l *Leader) client(ctx context.Context) (string, pb.ClusterClient, error) {
	deadline := time.Now().Add(leaderWait)
	for {
		if id, _ := l.raft.Leader(); id != "" {
			if mem, ok := l.fsm.Member(id); ok && mem.PeerTarget() != "" {
				cl, err := l.peers.Member(id, mem.PeerTarget())
				return id, cl, err
			}
		}
		if time.Now().After(deadline) {
			return "", nil, fmt.Errorf("%w: no leader with a known API address", raftmeta.ErrNotLeader)
		}
		select {
		case <-ctx.Done():
			return "", nil, fmt.Errorf("node: waiting for a leader: %w", ctx.Err())
		case <-time.After(leaderPoll):
		}
	}
}
