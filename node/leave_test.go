package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/wire"
	"github.com/kvoffload/kvoffload/txn"
)

// TestLeave: a member removed with Leave (sent to another follower, which forwards it) is
// gone from the Raft configuration and the member directory on every remaining node; the
// keys whose bytes it held are dropped from the metadata (no record without reachable data,
// G1), so they read NotFound and can be offloaded again; the cluster keeps offloading; the
// removed process stops accepting offloads instead of acknowledging keys nobody can read;
// an unknown ID is NotFound.
func TestLeave(t *testing.T) {
	nodes := openCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var leader *Node
	var followers []*Node
	for _, nd := range nodes {
		if nd.Raft().IsLeader() {
			leader = nd
		} else {
			followers = append(followers, nd)
		}
	}
	gone, via := followers[0], followers[1]
	keys := []string{keyOf("leave", 0), keyOf("leave", 1)}
	mustOffload(t, gone, objects(3, 8<<10, keys...))

	resp, err := (clusterService{n: via}).Leave(ctx, &pb.LeaveRequest{NodeId: gone.cfg.ID})
	if err != nil || resp.KeysDropped != uint64(len(keys)) {
		t.Fatalf("leave %s via %s: %v %v, want %d keys dropped", gone.cfg.ID, via.cfg.ID, resp, err, len(keys))
	}
	if _, err := (clusterService{n: via}).Leave(ctx, &pb.LeaveRequest{NodeId: gone.cfg.ID}); status.Code(err) != codes.NotFound {
		t.Fatalf("second leave of %s: %v, want NotFound (nothing left to do)", gone.cfg.ID, err)
	}
	if _, err := (clusterService{n: via}).Leave(ctx, &pb.LeaveRequest{NodeId: "nobody"}); status.Code(err) != codes.NotFound {
		t.Fatalf("leave of an unknown ID: %v, want NotFound", err)
	}
	for _, nd := range []*Node{leader, via} {
		waitApplied(t, nd, leader)
		servers, err := nd.Raft().Servers()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range servers {
			if s.ID == gone.cfg.ID {
				t.Fatalf("%s still lists %s in the Raft configuration: %+v", nd.cfg.ID, gone.cfg.ID, servers)
			}
		}
		if _, ok := nd.FSM().Member(gone.cfg.ID); ok {
			t.Fatalf("%s still lists %s in the member directory", nd.cfg.ID, gone.cfg.ID)
		}
		if own := nd.FSM().Owners()[gone.cfg.ID]; own.Keys != 0 {
			t.Fatalf("%s: %d keys still point at the removed node", nd.cfg.ID, own.Keys)
		}
		got, err := nd.BatchGet(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range got {
			if r.Status != kvoffload.NotFound {
				t.Fatalf("%s: key of the removed node read %s (%s), want NotFound", nd.cfg.ID, r.Status, r.Reason)
			}
		}
	}
	// A COMMIT the removed node still forwards (one in flight during the Leave) is refused,
	// so no key comes back owned by it after Leave dropped its keys.
	late := fsm.EncodeCommit(fsm.Commit{TxnID: kvoffload.NewTxnID(), Node: gone.cfg.ID, Entries: []fsm.Entry{{
		Key: keyOf("late", 0), Extent: fsm.Extent{Bucket: 1, Offset: 0, Length: 4096}, Size: 1, Sum: 1, Gen: 1,
	}}})
	if _, err := (clusterService{n: leader}).Propose(ctx, &pb.ProposeRequest{Command: late}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a COMMIT forwarded by the removed node: %v, want PermissionDenied", err)
	}
	// The dropped keys can be offloaded again, and then read.
	mustOffload(t, via, objects(3, 8<<10, keys...))
	checkReadable(t, leader, 3, 8<<10, keys...)
	mustOffload(t, via, objects(3, 8<<10, keyOf("after", 0)))
	checkReadable(t, leader, 3, 8<<10, keyOf("after", 0))

	octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
	defer ocancel()
	start := time.Now()
	res, err := gone.BatchOffload(octx, kvoffload.NewTxnID(), objects(3, 8<<10, keyOf("zombie", 0)))
	if err == nil && res[0].Outcome.OK() {
		t.Fatalf("the removed node acknowledged an offload: %+v", res)
	}
	if err == nil || !strings.Contains(err.Error(), "not in the cluster configuration") {
		t.Fatalf("offload on the removed node: %v %+v; want the leader's refusal", err, res)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the removed node took %v to refuse an offload", d)
	}
	t.Logf("offload on the removed node: %v", err)
	if _, ok := leader.FSM().Lookup(keyOf("zombie", 0)); ok {
		t.Fatal("the removed node committed a key")
	}

	// That refusal told the node it was removed: its health and readiness say so, and every
	// call fails at once as Unavailable naming the removal, also once it knows no leader (not
	// after ReadIndexTimeout per call, with its clients waiting until their deadlines).
	for what, err := range map[string]error{"healthy": gone.Healthy(), "ready": gone.Ready()} {
		if err == nil || !strings.Contains(err.Error(), "was removed from the cluster") {
			t.Fatalf("%s on the removed node: %v, want it to say the node was removed", what, err)
		}
	}
	if r, err := gone.health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("gRPC health of the removed node: %v %v, want NOT_SERVING", r, err)
	}
	for range 2 {
		start = time.Now()
		_, gerr := gone.BatchGet(ctx, keys)
		_, oerr := gone.BatchOffload(ctx, kvoffload.NewTxnID(), objects(3, 8<<10, keyOf("zombie", 1)))
		for _, err := range []error{gerr, oerr} {
			if !errors.Is(err, kvoffload.ErrUnavailable) || !errors.Is(err, txn.ErrRemoved) {
				t.Fatalf("a call on the removed node: %v, want ErrUnavailable wrapping txn.ErrRemoved", err)
			}
			if strings.Contains(err.Error(), "code = PermissionDenied") {
				t.Fatalf("a call on the removed node: %q carries the leader's raw gRPC status", err)
			}
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("two calls on the removed node took %v, want an immediate refusal", d)
		}
		waitNoLeader(t, gone, 10*time.Second) // the second round: no leader known any more
	}
}

// waitNoLeader waits until nd knows no Raft leader (a removed node stops hearing from it).
func waitNoLeader(t *testing.T, nd *Node, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for id, _ := nd.raft.Leader(); id != ""; id, _ = nd.raft.Leader() {
		if time.Now().After(deadline) {
			t.Fatalf("%s still knows leader %s after %v", nd.cfg.ID, id, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A removed node that no call reaches learns its removal from its own committed Raft
// configuration (watchRemoval): within a few seconds its health says so and calls fail at
// once, without a call ever reaching the leader.
func TestRemovedNodeLearnsWithoutACall(t *testing.T) {
	nodes := openCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var gone, via *Node
	for _, nd := range nodes {
		switch {
		case nd.Raft().IsLeader():
		case gone == nil:
			gone = nd
		default:
			via = nd
		}
	}
	if _, err := (clusterService{n: via}).Leave(ctx, &pb.LeaveRequest{NodeId: gone.cfg.ID}); err != nil {
		t.Fatalf("leave %s: %v", gone.cfg.ID, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for err := gone.Healthy(); err == nil || !strings.Contains(err.Error(), "was removed from the cluster"); err = gone.Healthy() {
		if time.Now().After(deadline) {
			t.Fatalf("the removed node, no call made: Healthy %v after 15 s, want it to say the node was removed", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	if _, err := gone.BatchGet(ctx, []string{keyOf("quiet", 0)}); !errors.Is(err, txn.ErrRemoved) || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("a call on the removed node: %v after %v, want txn.ErrRemoved at once", err, time.Since(start))
	}
	// Status still answers there (an operator's `storenode status --addr` of the removed
	// node), and says it was removed, so that it does not read as a normal member's view.
	hc := &headerCapture{}
	if st, err := (kvService{n: gone}).Status(grpc.NewContextWithServerTransportStream(ctx, hc), &pb.StatusRequest{}); err != nil ||
		len(st.Members) == 0 || !strings.Contains(strings.Join(hc.md.Get(wire.RefusingHeader), ""), "was removed from the cluster") {
		t.Fatalf("Status of the removed node: %v, header %v, %v; want its view and %s saying it was removed", st, hc.md, err, wire.RefusingHeader)
	}
}

// headerCapture is a grpc.ServerTransportStream that keeps the headers a handler sets.
type headerCapture struct{ md metadata.MD }

func (h *headerCapture) Method() string                  { return "/kvoffload.v1.KVOffload/Status" }
func (h *headerCapture) SetHeader(md metadata.MD) error  { h.md = metadata.Join(h.md, md); return nil }
func (h *headerCapture) SendHeader(md metadata.MD) error { return h.SetHeader(md) }
func (h *headerCapture) SetTrailer(metadata.MD) error    { return nil }
