package raftmeta

import (
	"context"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// testConfig is a bootstrapped single node with fast timeouts and no logs.
func testConfig(t *testing.T, id, dir string) Config {
	t.Helper()
	cfg := DefaultConfig(id, dir)
	cfg.Bootstrap = true
	cfg.HeartbeatTimeout = 100 * time.Millisecond
	cfg.ElectionTimeout = 100 * time.Millisecond
	cfg.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.ApplyTimeout = 5 * time.Second
	return cfg
}

// mustOpen opens a node on cfg with a fresh FSM and closes it at cleanup.
func mustOpen(t *testing.T, cfg Config) (*Node, *fsm.FSM) {
	t.Helper()
	f := fsm.New()
	n, err := Open(cfg, f)
	testkit.Must(t, err, "Open")
	testkit.CloseAtEnd(t, n)
	return n, f
}

// mustLead waits until n leads and has applied everything committed.
func mustLead(t *testing.T, n *Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.WaitLeader(ctx); err != nil {
		t.Fatalf("WaitLeader: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "n to lead", n.IsLeader)
	if err := n.Barrier(ctx); err != nil {
		t.Fatalf("Barrier: %v", err)
	}
}

func txnID(n int) fsm.TxnID { return fsm.TxnID{byte(n >> 8), byte(n)} }

func commitCmd(txn int, key string, sum uint64) []byte {
	return fsm.EncodeCommit(fsm.Commit{TxnID: txnID(txn), Node: "n1", Entries: []fsm.Entry{{
		Key: key, Extent: fsm.Extent{Bucket: 1, Offset: int64(txn) * 100, Length: 100}, Size: 100, Sum: sum, Gen: 1,
	}}})
}

func mustPropose(t *testing.T, n *Node, cmd []byte) *fsm.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := n.Propose(ctx, cmd)
	if err != nil {
		t.Fatalf("Propose: %v", err)
	}
	return r
}
