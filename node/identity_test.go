package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvoffload/kvoffload/fsm"
)

// memberConfig is a cluster member's configuration on fresh addresses.
func memberConfig(t *testing.T, dir, id string, join ...string) Config {
	cfg := testConfig(dir)
	cfg.ID, cfg.Txn.NodeID = id, id
	cfg.RaftAddr, cfg.APIAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	cfg.Join = join
	return cfg
}

// openNamed starts a cluster of the nodes ids: the first bootstraps, the others join it.
func openNamed(t *testing.T, ids ...string) ([]*Node, []Config) {
	t.Helper()
	base := t.TempDir()
	var nodes []*Node
	var cfgs []Config
	for i, id := range ids {
		cfg := memberConfig(t, filepath.Join(base, id), id)
		if i > 0 {
			cfg.Join = []string{nodes[0].PeerAddr()}
		}
		nodes, cfgs = append(nodes, mustOpen(t, cfg)), append(cfgs, cfg)
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			_ = nd.Close()
		}
	})
	return nodes, cfgs
}

func keysN(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = keyOf(prefix, i)
	}
	return keys
}

func countKeys(n *Node, prefix string) int {
	c := 0
	n.fsm.ForEach(func(e fsm.Entry) bool {
		if strings.Contains(e.Key, ":"+prefix+"@") {
			c++
		}
		return true
	})
	return c
}

// TestTwoClustersCrossedAddresses is an address takeover: cluster A (a1, with keys) and
// cluster B (b1..b3, with keys) on one host. A fresh node started as a1, on a1's own
// addresses, joins B and is killed; then the real a1 restarts from its own directory. B's
// leader keeps sending Raft traffic to the address it has for "a1": the cluster-ID handshake
// refuses it, so every key of A and of B stays where it was, each cluster keeps its own
// members, and a1 starts again from its data as often as it is restarted.
func TestTwoClustersCrossedAddresses(t *testing.T) {
	aCfg := memberConfig(t, filepath.Join(t.TempDir(), "a1"), "a1")
	a1 := mustOpen(t, aCfg)
	idA := a1.ClusterID()
	mustOffload(t, a1, objects(1, 8<<10, keysN("ca", 12)...))
	mustClose(t, a1)

	b, _ := openNamed(t, "b1", "b2", "b3")
	idB := b[0].ClusterID()
	if idA == "" || idB == "" || idA == idB {
		t.Fatalf("cluster IDs %q and %q: want two different, non-empty", idA, idB)
	}
	for _, nd := range b[1:] {
		if nd.ClusterID() != idB {
			t.Fatalf("member %s is in cluster %q, want %q", nd.cfg.ID, nd.ClusterID(), idB)
		}
	}
	mustOffload(t, b[1], objects(2, 8<<10, keysN("cb", 8)...))

	impostor := aCfg
	impostor.DataDir = filepath.Join(t.TempDir(), "impostor")
	impostor.Join = []string{b[0].PeerAddr()}
	imp := mustOpen(t, impostor) // a fresh node may join B under a free ID: B admits it
	if imp.ClusterID() != idB {
		t.Fatalf("the impostor joined cluster %q, want %q", imp.ClusterID(), idB)
	}
	_ = imp.Close()

	a1 = mustOpen(t, aCfg)
	defer a1.Close()
	time.Sleep(3 * time.Second) // B's leader retries a1's Raft address all this time
	if a1.ClusterID() != idA || !a1.Raft().IsLeader() {
		t.Fatalf("a1: cluster %q, leader %v; want its own cluster %q, leading it", a1.ClusterID(), a1.Raft().IsLeader(), idA)
	}
	if got, foreign := countKeys(a1, "ca"), countKeys(a1, "cb"); got != 12 || foreign != 0 {
		t.Fatalf("a1 holds %d of A's 12 keys and %d of B's, want 12 and 0", got, foreign)
	}
	checkReadable(t, a1, 1, 8<<10, keysN("ca", 12)...)
	if servers := mustServers(t, a1); len(servers) != 1 {
		t.Fatalf("a1's configuration %v, want only itself", servers)
	}
	leaderB := leaderOf(t, b...)
	if countKeys(leaderB, "cb") != 8 || countKeys(leaderB, "ca") != 0 {
		t.Fatalf("B's leader holds %d of its 8 keys and %d of A's", countKeys(leaderB, "cb"), countKeys(leaderB, "ca"))
	}
	checkReadable(t, b[1], 2, 8<<10, keysN("cb", 8)...)
	mustClose(t, a1)
	a1 = mustOpen(t, aCfg) // and again
	checkReadable(t, a1, 1, 8<<10, keysN("ca", 12)...)
}

// TestJoinAcrossClustersRefused: a member of one cluster restarted with --join pointing at
// another cluster does not start, and the error names both cluster IDs; in both directions.
func TestJoinAcrossClustersRefused(t *testing.T) {
	a, aCfgs := openNamed(t, "x1")
	b, bCfgs := openNamed(t, "y1", "y2")
	for _, tc := range []struct {
		node   *Node
		cfg    Config
		target *Node
	}{{b[1], bCfgs[1], a[0]}, {a[0], aCfgs[0], b[0]}} { // each target is still running
		mine, theirs := tc.node.ClusterID(), tc.target.ClusterID()
		mustClose(t, tc.node)
		cfg := tc.cfg
		cfg.Join = []string{tc.target.PeerAddr()}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		n, err := Open(ctx, cfg)
		cancel()
		if err == nil {
			n.Close()
			t.Fatalf("%s (cluster %s) started with --join to cluster %s", cfg.ID, mine, theirs)
		}
		if !errors.Is(err, ErrClusterMismatch) || !strings.Contains(err.Error(), "points at cluster "+theirs) || !strings.Contains(err.Error(), "belongs to cluster "+mine) {
			t.Fatalf("%s with --join to the other cluster: %v, want ErrClusterMismatch naming %s and %s", cfg.ID, err, mine, theirs)
		}
		cfg.Join = nil
		n = mustOpen(t, cfg) // without the wrong --join it restarts as before
		if n.ClusterID() != mine {
			t.Fatalf("%s restarted in cluster %q, want %q", cfg.ID, n.ClusterID(), mine)
		}
		n.Close()
	}
}

// TestJoinIgnoredWarns: a member restarted with --join to its own cluster starts, and says
// in a WARN that the --join was ignored.
func TestJoinIgnoredWarns(t *testing.T) {
	nodes, cfgs := openNamed(t, "w1", "w2")
	mustClose(t, nodes[1])
	cfg := cfgs[1]
	cfg.Join = []string{nodes[0].PeerAddr()}
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n := mustOpen(t, cfg)
	n.Close()
	if !strings.Contains(logs.String(), "--join ignored") || !strings.Contains(logs.String(), nodes[0].ClusterID()) {
		t.Fatalf("no WARN that --join was ignored, naming the cluster; logs:\n%s", logs.String())
	}
}

// TestFreshNodeAtStaleAddress: B's member b3 is down, not removed; a fresh node n4, meant
// for cluster A, starts on b3's Raft address. B's leader keeps dialing that address: n4
// refuses it (a node that knows no cluster takes Raft traffic only from the one it asked to
// join), joins A, and holds none of B's metadata.
func TestFreshNodeAtStaleAddress(t *testing.T) {
	a, aCfgs := openNamed(t, "a1")
	b, bCfgs := openNamed(t, "b1", "b2", "b3")
	mustOffload(t, b[0], objects(3, 8<<10, keysN("stale", 6)...))
	for _, nd := range b {
		waitApplied(t, nd, b[0])
	}
	mustClose(t, b[2])
	idA := a[0].ClusterID()
	mustClose(t, a[0]) // A is down while n4 starts: n4 waits to join, its Raft port open
	cfg := memberConfig(t, filepath.Join(t.TempDir(), "n4"), "n4", a[0].PeerAddr())
	cfg.RaftAddr = bCfgs[2].RaftAddr // the address B has for b3
	type opened struct {
		n   *Node
		err error
	}
	done := make(chan opened, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := Open(ctx, cfg)
		done <- opened{n, err}
	}()
	time.Sleep(2 * time.Second) // B's leader retries b3's address meanwhile
	a[0] = mustOpen(t, aCfgs[0])
	r := <-done
	if r.err != nil {
		t.Fatalf("n4 joining A: %v", r.err)
	}
	n4 := r.n
	defer n4.Close()
	if n4.ClusterID() != idA {
		t.Fatalf("n4 is in cluster %q, want A's %q (B is %q)", n4.ClusterID(), idA, b[0].ClusterID())
	}
	if got := countKeys(n4, "stale"); got != 0 {
		t.Fatalf("n4 holds %d of B's keys", got)
	}
	if servers := mustServers(t, n4); len(servers) != 2 {
		t.Fatalf("n4's configuration %v, want A's two members", servers)
	}
}

// waitLeaderKnown waits until n knows a leader other than gone, with a member record.
func waitLeaderKnown(t *testing.T, n *Node, gone string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if id, _ := n.raft.Leader(); id != "" && id != gone {
			if _, ok := n.fsm.Member(id); ok {
				return
			}
		}
	}
	t.Fatal("no leader known within 10 s")
}

// TestClusterIDRecoveredWithoutFile: a member whose CLUSTER_ID file was lost takes the ID
// from its Raft state before it dials or judges any Raft traffic, so two of three members
// restarted together elect a leader (the one without the file, whose log is newer), and the
// file is written again.
func TestClusterIDRecoveredWithoutFile(t *testing.T) {
	nodes, cfgs := openNamed(t, "c1", "c2", "c3")
	id := nodes[0].ClusterID()
	mustClose(t, nodes[0]) // c1's log ends here: c2's will be newer, so only c2 can be elected
	leaderOf(t, nodes[1], nodes[2])
	waitLeaderKnown(t, nodes[1], "c1")
	mustOffload(t, nodes[1], objects(4, 8<<10, keysN("lost", 4)...))
	waitApplied(t, nodes[2], nodes[1])
	mustClose(t, nodes[1])
	mustClose(t, nodes[2])
	if err := os.Remove(filepath.Join(cfgs[1].DataDir, clusterIDFile)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	reopened := make([]*Node, 2)
	errs := make([]error, 2)
	for i := range reopened {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			reopened[i], errs[i] = Open(ctx, cfgs[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("restart of %s: %v", cfgs[i].ID, err)
		}
		defer reopened[i].Close()
	}
	if got, err := readClusterID(cfgs[1].DataDir); err != nil || got != id {
		t.Fatalf("c2's CLUSTER_ID after the restart: %q %v, want %q", got, err, id)
	}
	checkReadable(t, reopened[1], 4, 8<<10, keysN("lost", 4)...)
}

// TestClusterIDMetric: a member exports its cluster ID as kvoffload_cluster_info{cluster_id}.
func TestClusterIDMetric(t *testing.T) {
	cfg := memberConfig(t, filepath.Join(t.TempDir(), "m1"), "m1")
	reg := prometheus.NewRegistry()
	cfg.Registry = reg
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "kvoffload_cluster_info" {
			if m := mf.GetMetric(); len(m) == 1 && m[0].GetLabel()[0].GetValue() == n.ClusterID() && m[0].GetGauge().GetValue() == 1 {
				return
			}
			t.Fatalf("kvoffload_cluster_info %v, want one series for %s", mf.GetMetric(), n.ClusterID())
		}
	}
	t.Fatal("no kvoffload_cluster_info metric")
}

// TestRaftPortTakenIsAnError: a Raft address another process listens on makes Open fail with
// an error naming it, not panic (raftmeta must not hand back a nil transport to be closed).
func TestRaftPortTakenIsAnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := memberConfig(t, t.TempDir(), "n1")
	cfg.RaftAddr = ln.Addr().String()
	n, err := Open(context.Background(), cfg)
	if err == nil {
		_ = n.Close()
		t.Fatalf("Open on a taken Raft address %s succeeded", cfg.RaftAddr)
	}
	if !strings.Contains(err.Error(), cfg.RaftAddr) {
		t.Fatalf("error %q does not name the address %s", err, cfg.RaftAddr)
	}
}
