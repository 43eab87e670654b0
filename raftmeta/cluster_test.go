package raftmeta

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/third_party/raft"
)

// TestInmemCluster joins three in-memory nodes: commits replicate to every
// FSM (equal Hash), and a follower refuses proposals with ErrNotLeader.
func TestInmemCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	var nodes []*Node
	var fsms []*fsm.FSM
	for i := range 3 {
		cfg := clusterConfig(t, fmt.Sprintf("n%d", i+1))
		cfg.Bootstrap = i == 0
		n, f := mustOpen(t, cfg)
		nodes, fsms = append(nodes, n), append(fsms, f)
	}
	for _, a := range nodes { // full mesh of in-memory transports
		for _, b := range nodes {
			if a != b {
				a.trans.(*raft.InmemTransport).Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
	mustLead(t, nodes[0])
	for _, n := range nodes[1:] {
		addAny(t, nodes, n.cfg.NodeID, n.Addr(), true)
	}
	for i := range 30 {
		proposeAny(t, nodes, commitCmd(i, fmt.Sprint("k", i), 1))
	}
	testkit.Eventually(t, 10*time.Second, "the followers' FSMs to match the leader's", func() bool {
		return fsms[1].Hash() == fsms[0].Hash() && fsms[2].Hash() == fsms[0].Hash()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	leader := leaderOf(t, nodes)
	followers := without(nodes, leader)
	if err := followers[0].WaitLeader(ctx); err != nil {
		t.Fatalf("follower WaitLeader: %v", err)
	}
	if _, err := followers[0].Propose(ctx, commitCmd(100, "x", 1)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Propose on follower: %v, want ErrNotLeader", err)
	}
	if err := followers[1].Barrier(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Barrier on follower: %v, want ErrNotLeader", err)
	}
	t.Logf("replicated %+v", fsms[2].Stats())

	// Read index: the leader's covers every acknowledged command, a follower that has
	// applied it sees them, and a follower cannot issue one.
	acked := mustPropose(t, leader, commitCmd(150, "ri", 1))
	index, err := leader.ReadIndex(ctx)
	if err != nil || index < acked.Index {
		t.Fatalf("leader ReadIndex = %d, %v; want >= %d", index, err, acked.Index)
	}
	if err := followers[0].WaitApplied(ctx, index); err != nil {
		t.Fatal(err)
	}
	if _, ok := fsms[indexOf(nodes, followers[0])].Lookup("ri"); !ok {
		t.Fatal("a follower that applied the read index misses an acknowledged key")
	}
	if _, err := followers[1].ReadIndex(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("ReadIndex on follower: %v, want ErrNotLeader", err)
	}

	// Partition the leader away and propose on it: the outcome is unknown (or
	// refused, if it stepped down first). After healing, a retry with the same
	// TxnID on the new leader commits exactly once.
	isolate(nodes, leader, false)
	_, err = leader.Propose(ctx, commitCmd(200, "p", 1))
	if !errors.Is(err, ErrIndeterminate) && !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Propose on isolated leader: %v, want ErrIndeterminate or ErrNotLeader", err)
	}
	t.Logf("isolated leader: %v", err)
	if index, err := leader.ReadIndex(ctx); err == nil {
		t.Fatalf("an isolated leader issued read index %d", index)
	}
	newLeader := leaderOf(t, followers)
	isolate(nodes, leader, true)
	r := mustPropose(t, newLeader, commitCmd(200, "p", 1))
	if r.Keys[0].Outcome != fsm.OutcomeStored {
		t.Fatalf("retry after partition: %+v", r)
	}
	if again := mustPropose(t, newLeader, commitCmd(200, "p", 1)); again.Index != r.Index {
		t.Fatalf("second retry applied again: %+v vs %+v", again, r)
	}
	// The healed old leader may first disrupt the cluster with the higher term its lone
	// elections reached; on a loaded 2-core CI machine under -race, with these 100 ms
	// timeouts, convergence took over 10 s once and over 30 s once (leaders churning while
	// the other packages' tests ran). On a timeout each node's Raft state is logged.
	start := time.Now()
	for fsms[0].Hash() != fsms[1].Hash() || fsms[1].Hash() != fsms[2].Hash() {
		if time.Since(start) > 90*time.Second {
			for i, n := range nodes {
				st := n.raft.Stats()
				t.Logf("node %d: %s term %s last log %s applied %s leader %s; fsm %+v", i, st["state"], st["term"], st["last_log_index"], st["applied_index"], st["last_contact"], fsms[i].Stats())
			}
			t.Fatalf("the FSMs did not converge within 90 s of healing the partition")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("the FSMs converged %s after healing", time.Since(start).Round(time.Millisecond))
}

// isolate cuts (or, with heal, restores) every link between x and the others.
func isolate(nodes []*Node, x *Node, heal bool) {
	xt := x.trans.(*raft.InmemTransport)
	for _, n := range nodes {
		if n == x {
			continue
		}
		nt := n.trans.(*raft.InmemTransport)
		if heal {
			xt.Connect(n.trans.LocalAddr(), nt)
			nt.Connect(x.trans.LocalAddr(), xt)
		} else {
			xt.Disconnect(n.trans.LocalAddr())
			nt.Disconnect(x.trans.LocalAddr())
		}
	}
}

func indexOf(nodes []*Node, x *Node) int {
	for i, n := range nodes {
		if n == x {
			return i
		}
	}
	return -1
}

// A sole voter issues read indexes without a VerifyLeader round (no one else can have
// elected a leader); once another voter is in the configuration it needs the round again.
func TestSoleVoterReadIndex(t *testing.T) {
	nodes, _ := openCluster(t, 2, false)
	leader := leaderOf(t, nodes)
	if !leader.soleVoter() {
		t.Fatal("a bootstrapped single voter does not see itself as the sole voter")
	}
	acked := mustPropose(t, leader, commitCmd(1, "k", 1))
	index, err := leader.ReadIndex(ctxT(t))
	if err != nil || index < acked.Index {
		t.Fatalf("sole voter ReadIndex = %d, %v; want >= %d", index, err, acked.Index)
	}
	addAny(t, nodes, "n2", string(nodes[1].trans.LocalAddr()), true)
	if leader.soleVoter() {
		t.Fatal("a leader of 2 voters takes itself for the sole voter")
	}
}
