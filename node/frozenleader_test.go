package node

import (
	"context"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// frozenLeaderCluster starts three members and puts a cutProxy in front of the leader's peer
// service (its member record names the proxy, so the followers forward to the leader through
// it).
func frozenLeaderCluster(t *testing.T) (leader, follower, other *Node, proxy *cutProxy) {
	t.Helper()
	nodes, _ := openNamed(t, "f1", "f2", "f3")
	leader = leaderOf(t, nodes...)
	for _, nd := range nodes {
		switch {
		case nd == leader:
		case follower == nil:
			follower = nd
		default:
			other = nd
		}
	}
	proxy = newCutProxy(t, leader.PeerAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	me, ok := leader.fsm.Member(leader.cfg.ID)
	if !ok {
		t.Fatalf("the leader %s has no member record", leader.cfg.ID)
	}
	me.PeerAddr = proxy.lis.Addr().String()
	if _, err := leader.raft.Propose(ctx, fsm.EncodeSetMember(fsm.SetMember{TxnID: kvoffload.NewTxnID(), Member: me})); err != nil {
		t.Fatalf("recording the leader's peer address as the proxy's: %v", err)
	}
	waitApplied(t, follower, leader)
	waitApplied(t, other, leader)
	// A batch through the follower before the freeze: the forwarding path works and its
	// connection to the leader is the proxy's.
	mustOffload(t, follower, objects(7, 4<<10, keyOf("warm", 0)))
	return leader, follower, other, proxy
}

// TestFrozenLeaderForwardedBatch: the leader is frozen as by SIGSTOP (its sockets stay
// open; its Raft and its peer service answer nothing) while the COMMIT of a batch
// offloaded through a follower is at the leader: before the leader applied it ("unapplied"),
// or after, its reply not yet sent ("applied"). The follower abandons the forwarded proposal
// once its Raft stops following the frozen leader, sends it to the new leader and gets the
// outcome recorded under the txn ID: the batch is Stored within 3 s of the freeze (not after
// the proposal's 10 s deadline), exactly once, and reads back through both live members.
func TestFrozenLeaderForwardedBatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		applied bool // the leader applies the COMMIT, then freezes
	}{{"unapplied", false}, {"applied", true}} {
		t.Run(tc.name, func(t *testing.T) {
			leader, follower, other, proxy := frozenLeaderCluster(t)
			seed, size := testkit.Seed(t), 16<<10
			keys := keysN("frozen-"+tc.name, 4)
			id := kvoffload.NewTxnID()
			stopRaft := func() {
				if err := leader.raft.Raft().Shutdown().Error(); err != nil {
					t.Errorf("stopping the leader's raft: %v", err)
				}
			}
			// The freeze comes as the follower is about to propose the COMMIT (its data is
			// synced, its catch-up read index done): first the peer service stops answering;
			// then Raft stops, at once or once the leader has applied the COMMIT.
			var frozenAt time.Time
			frozen := make(chan struct{})
			failpoint.EnableFunc(failpoint.DataSynced, 1, func() error {
				frozenAt = time.Now()
				proxy.hold()
				if !tc.applied {
					stopRaft()
				}
				close(frozen)
				return nil
			})
			defer failpoint.Disable(failpoint.DataSynced)
			type outcome struct {
				res []kvoffload.KeyResult
				err error
				at  time.Time
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := follower.BatchOffload(context.Background(), id, objects(seed, size, keys...))
				done <- outcome{res, err, time.Now()}
			}()
			if tc.applied {
				<-frozen
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
					if _, ok := leader.fsm.TxnResult(id); ok {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the leader did not apply the batch's COMMIT within 10 s")
					}
				}
				stopRaft()
			}
			var o outcome
			select {
			case o = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the batch through the follower did not return within 30 s of the freeze")
			}
			stall := o.at.Sub(frozenAt)
			t.Logf("leader %s frozen (%s): the batch through follower %s returned %s later", leader.cfg.ID, tc.name, follower.cfg.ID, stall)
			if o.err != nil {
				t.Fatalf("offload through the follower: %v", o.err)
			}
			for _, r := range o.res {
				if r.Outcome != kvoffload.Stored {
					t.Fatalf("%s: %s %s", r.Key, r.Outcome, r.Reason)
				}
			}
			if stall > 3*time.Second {
				t.Errorf("the batch waited %s after the leader froze, want at most 3 s", stall)
			}
			waitApplied(t, other, follower)
			for _, nd := range []*Node{follower, other} {
				checkReadable(t, nd, seed, size, keys...)
				res, ok := nd.fsm.TxnResult(id)
				if !ok || res.Aborted || len(res.Keys) != len(keys) {
					t.Fatalf("%s: the batch's recorded result %+v (%v)", nd.cfg.ID, res, ok)
				}
				for _, k := range res.Keys {
					if k.Outcome != fsm.OutcomeStored || k.Entry.TxnID != id {
						t.Fatalf("%s: recorded outcome of %s: %+v", nd.cfg.ID, k.Key, k)
					}
				}
				if own := nd.fsm.Owners()[follower.cfg.ID]; own.Keys != len(keys)+1 {
					t.Fatalf("%s: %s owns %d keys in metadata, want %d", nd.cfg.ID, follower.cfg.ID, own.Keys, len(keys)+1)
				}
			}
			// The COMMIT the leader applied before it froze was sent again to the new leader,
			// and the FSM answered the repeat with the recorded result (checked above).
			commits := 0
			if err := other.raft.LogCommands(func(data []byte) bool {
				if _, cmd, err := fsm.Decode(data); err == nil {
					if c, ok := cmd.(fsm.Commit); ok && c.TxnID == id {
						commits++
					}
				}
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if t.Logf("the batch's COMMIT is %d times in the log", commits); tc.applied && commits < 2 {
				t.Errorf("the batch's COMMIT is %d times in the log, want it sent again after the freeze", commits)
			}
			checkConsistent(t, follower)
		})
	}
}

// TestFrozenLeaderCatchUp: a batch that reaches a follower just after the leader froze waits
// for its catch-up read index (Coordinator.CatchUp) through the election that replaces the
// leader, instead of failing it after one ReadIndexTimeout and sending the client elsewhere
// (possibly to the frozen leader, whose stall watch then costs another 2 s).
func TestFrozenLeaderCatchUp(t *testing.T) {
	leader, follower, _, proxy := frozenLeaderCluster(t)
	seed, size := testkit.Seed(t), 16<<10
	keys := keysN("frozen-catchup", 4)
	frozenAt := time.Now()
	proxy.hold()
	if err := leader.raft.Raft().Shutdown().Error(); err != nil {
		t.Fatalf("stopping the leader's raft: %v", err)
	}
	res, err := follower.BatchOffload(context.Background(), kvoffload.NewTxnID(), objects(seed, size, keys...))
	stall := time.Since(frozenAt)
	t.Logf("leader %s frozen: the batch through follower %s returned %s later", leader.cfg.ID, follower.cfg.ID, stall)
	if err != nil {
		t.Fatalf("offload through the follower right after the freeze: %v", err)
	}
	for _, r := range res {
		if r.Outcome != kvoffload.Stored {
			t.Fatalf("%s: %s %s", r.Key, r.Outcome, r.Reason)
		}
	}
	if stall > 3*time.Second {
		t.Errorf("the batch waited %s after the leader froze, want at most 3 s", stall)
	}
	checkReadable(t, follower, seed, size, keys...)
}
