package node

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/internal/freeport"
)

// freeAddr returns an address on 127.0.0.1 whose port was free a moment ago and that no
// other call in this test binary returned (freeport.Addr).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// openCluster starts n nodes in this process over real TCP: the first bootstraps, the others
// join through it.
func openCluster(t *testing.T, n int) []*Node {
	t.Helper()
	base := t.TempDir()
	var nodes []*Node
	for i := range n {
		cfg := testConfig(filepath.Join(base, string(rune('a'+i))))
		cfg.ID = string(rune('a' + i))
		cfg.Txn.NodeID = cfg.ID
		cfg.RaftAddr, cfg.APIAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
		if i > 0 {
			cfg.Join = []string{nodes[0].PeerAddr()}
		}
		nodes = append(nodes, mustOpen(t, cfg))
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			_ = nd.Close()
		}
	})
	return nodes
}

// TestClusterInProcess: offload through a follower, read through every node (bytes are
// forwarded from the owner), remove through another; followers forward their proposals.
func TestClusterInProcess(t *testing.T) {
	nodes := openCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var follower *Node
	for _, nd := range nodes {
		if !nd.Raft().IsLeader() {
			follower = nd
			break
		}
	}
	keys := []string{keyOf("cl", 0), keyOf("cl", 1), keyOf("cl", 2)}
	mustOffload(t, follower, objects(5, 64<<10, keys...))
	for _, nd := range nodes {
		waitApplied(t, nd, follower)
		checkReadable(t, nd, 5, 64<<10, keys...)
	}
	if own := nodes[0].FSM().Owners()[follower.cfg.ID]; own.Keys != 3 {
		t.Fatalf("owner %s holds %d keys in metadata, want 3", follower.cfg.ID, own.Keys)
	}
	// Concurrent duplicate offloads of one key through two nodes: both succeed, one record.
	var wg sync.WaitGroup
	dup := keyOf("cl", 9)
	for _, nd := range nodes[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := nd.BatchOffload(ctx, kvoffload.NewTxnID(), objects(5, 64<<10, dup))
			if err != nil || !res[0].Outcome.OK() {
				t.Errorf("duplicate offload via %s: %v %+v", nd.cfg.ID, err, res)
			}
		}()
	}
	wg.Wait()
	res, err := nodes[2].Remove(ctx, keys[:1])
	if err != nil || !res[0].Removed {
		t.Fatalf("remove: %v %+v", err, res)
	}
	for _, nd := range nodes {
		waitApplied(t, nd, nodes[2])
		if got, _ := nd.BatchGet(ctx, keys[:1]); got[0].Status != kvoffload.NotFound {
			t.Fatalf("removed key via %s: %s", nd.cfg.ID, got[0].Status)
		}
	}
	for _, nd := range nodes {
		if nd.FSM().Hash() != nodes[0].FSM().Hash() {
			waitApplied(t, nd, nodes[0])
		}
	}
}

// waitApplied waits until nd's FSM has applied at least what ref's raft has.
func waitApplied(t *testing.T, nd, ref *Node) {
	t.Helper()
	want := ref.Raft().AppliedIndex()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nd.Raft().WaitApplied(ctx, want); err != nil {
		t.Fatalf("%s: %v", nd.cfg.ID, err)
	}
}

// TestJoinUnderExistingIDRefused: a node with an empty data directory cannot join under the ID
// of a member that owns keys (its disk died); the keys stay readable through the others.
func TestJoinUnderExistingIDRefused(t *testing.T) {
	nodes := openCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	victim := nodes[1]
	keys := []string{keyOf("imp", 0), keyOf("imp", 1)}
	mustOffload(t, victim, objects(7, 16<<10, keys...))
	cfg := victim.cfg
	if err := victim.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir() // the disk was lost
	cfg.RaftAddr, cfg.APIAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	cfg.Join = []string{nodes[0].PeerAddr()}
	jctx, jcancel := context.WithTimeout(ctx, 15*time.Second)
	defer jcancel()
	if n, err := Open(jctx, cfg); err == nil {
		n.Close()
		t.Fatal("a fresh node joined under the ID of a member that owns keys")
	} else {
		t.Logf("refused as expected: %v", err)
	}
	for _, nd := range []*Node{nodes[0], nodes[2]} {
		waitApplied(t, nd, leaderOf(t, nodes[0], nodes[2]))
		if own := nd.FSM().Owners()[cfg.ID]; own.Keys != len(keys) {
			t.Fatalf("%s: the lost node's keys in metadata: %d, want %d", nd.cfg.ID, own.Keys, len(keys))
		}
	}
}

// leaderOf returns the node among nodes that leads, waiting up to 10 s for one.
func leaderOf(t *testing.T, nodes ...*Node) *Node {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, nd := range nodes {
			if nd.Raft().IsLeader() {
				return nd
			}
		}
	}
	t.Fatal("no leader among the nodes within 10 s")
	return nil
}

// TestJoinViaAPIAddrRefused: --join names a member's API address instead of its peer address;
// the node refuses at once, naming the mistake, instead of retrying forever.
func TestJoinViaAPIAddrRefused(t *testing.T) {
	nodes := openCluster(t, 1)
	cfg := testConfig(t.TempDir())
	cfg.ID, cfg.Txn.NodeID = "b", "b"
	cfg.RaftAddr, cfg.APIAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	cfg.Join = []string{nodes[0].APIAddr()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := Open(ctx, cfg)
	if err == nil {
		n.Close()
		t.Fatal("joined through an API address")
	}
	if ctx.Err() != nil || !strings.Contains(err.Error(), "--peer-addr") {
		t.Fatalf("want an at-once refusal naming --peer-addr, got: %v", err)
	}
}
