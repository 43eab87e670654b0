//go:build chaos

package chaos

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// TestCrossedClusters: two clusters on one host never take each other's keys or members
// through a reused node ID and its addresses. Cluster A (one node, a1) and cluster B
// (n1..n3), each with acknowledged keys. A fresh node started as a1 on a1's own addresses
// joins B and is killed; the real a1 restarts from its own directory while B's leader keeps
// sending to the address it has for "a1"; then a1 is started with --join pointing at B.
// Afterwards every key of A reads back through a1 and none of B's, every key of B through B
// and none of A's, each cluster lists only its own members, and a1 restarts.
func TestCrossedClusters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	w := Workload{Seed: testkit.Seed(t), BlockSize: 64 << 10}
	a := startClusterWith(t, 1, "", func(p *proc) { p.id = "a1" })
	a1 := a.procs[0]
	keysA, keysB := keysNamed("crossA", 12), keysNamed("crossB", 8)
	cl := a.dial(ctx, a1.api)
	mustOffloadVia(t, ctx, cl, w, keysA)
	cl.Close()
	b := startCluster(t, 3, "")
	cl = b.dial(ctx, b.procs[1].api)
	mustOffloadVia(t, ctx, cl, w, keysB)
	cl.Close()

	a.kill(a1)
	impostor := &proc{id: a1.id, data: filepath.Join(t.TempDir(), "impostor"), raft: a1.raft, api: a1.api, peer: a1.peer, http: a1.http}
	b.procs = append(b.procs, impostor) // b.start adds --join to B's first node
	b.start(impostor)
	b.waitReady(impostor, 30*time.Second)
	b.kill(impostor)
	b.procs = b.procs[:3]

	a.restart(a1)
	time.Sleep(3 * time.Second) // B's leader retries "a1" at a1's Raft address meanwhile
	check := func(when string) {
		t.Helper()
		ca := a.dial(ctx, a1.api)
		defer ca.Close()
		if ok, first := readAll(t, ctx, ca, w, keysA); ok != len(keysA) {
			t.Fatalf("%s: %d of A's %d keys through a1 (%s)", when, ok, len(keysA), first)
		}
		if ok, _ := readAll(t, ctx, ca, w, keysB); ok != 0 {
			t.Fatalf("%s: %d of B's keys readable through a1", when, ok)
		}
		st, err := ca.Status(ctx)
		if err != nil || len(st.Members) != 1 || st.Members[0].NodeID != "a1" {
			t.Fatalf("%s: a1's status %v %v, want a1 alone", when, st, err)
		}
		cb := b.dial(ctx, b.procs[0].api)
		defer cb.Close()
		if ok, first := readAll(t, ctx, cb, w, keysB); ok != len(keysB) {
			t.Fatalf("%s: %d of B's %d keys through B (%s)", when, ok, len(keysB), first)
		}
		if ok, _ := readAll(t, ctx, cb, w, keysA); ok != 0 {
			t.Fatalf("%s: %d of A's keys readable through B", when, ok)
		}
		stB, err := cb.Status(ctx)
		if err != nil || stB.ClusterID == st.ClusterID || stB.ClusterID == "" {
			t.Fatalf("%s: cluster IDs A %q, B %q (%v): want two different", when, st.ClusterID, stB.ClusterID, err)
		}
		totals.checks += len(keysA) + len(keysB)
	}
	check("after the crossed restart")

	a.kill(a1)
	a1.extraArgs = []string{"--join", b.procs[0].peer}
	a.start(a1)
	select {
	case <-a1.exited:
		if a1.cmd.ProcessState.ExitCode() == 0 {
			t.Fatal("a1 with --join to cluster B exited 0")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a1 with --join to cluster B started")
	}
	a1.extraArgs = nil
	a.restart(a1)
	check("after a1 refused --join to B and restarted")
}
