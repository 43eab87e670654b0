package raftmeta

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestSnapshotInstallLivelock is hashicorp/raft#697 (third_party/raft/KVOFFLOAD.md): a
// follower whose log holds stale entries of an old term at and after the leader's snapshot
// index, as a deposed leader keeps, must catch up after one InstallSnapshot. Unpatched v1.7.3 rejects every AppendEntries after the install
// and is sent the snapshot again forever, so the follower never applies the leader's last
// entry; the test then fails after 10 s.
func TestSnapshotInstallLivelock(t *testing.T) {
	conf := func(id string) *raft.Config {
		c := raft.DefaultConfig()
		c.LocalID = raft.ServerID(id)
		c.HeartbeatTimeout, c.ElectionTimeout = 100*time.Millisecond, 100*time.Millisecond
		c.LeaderLeaseTimeout, c.CommitTimeout = 50*time.Millisecond, 5*time.Millisecond
		c.SnapshotThreshold, c.SnapshotInterval = 1<<20, time.Hour // snapshots only when asked
		c.TrailingLogs = 4
		c.Logger = hclog.NewNullLogger()
		return c
	}
	type member struct {
		r     *raft.Raft
		fsm   *raft.MockFSM
		store *raft.InmemStore
		trans *raft.InmemTransport
	}
	start := func(id string, store *raft.InmemStore, trans *raft.InmemTransport) *member {
		m := &member{fsm: &raft.MockFSM{}, store: store, trans: trans}
		r, err := raft.NewRaft(conf(id), m.fsm, store, store, raft.NewInmemSnapshotStore(), trans)
		if err != nil {
			t.Fatal(err)
		}
		m.r = r
		t.Cleanup(func() { _ = r.Shutdown().Error() })
		return m
	}

	// Two voters, a (the bootstrap leader) and b.
	stores := map[string]*raft.InmemStore{}
	trans := map[string]*raft.InmemTransport{}
	for _, id := range []string{"a", "b", "f"} {
		stores[id] = raft.NewInmemStore()
		_, trans[id] = raft.NewInmemTransport(raft.ServerAddress(id))
	}
	for _, x := range trans {
		for _, y := range trans {
			if x != y {
				x.Connect(y.LocalAddr(), y)
			}
		}
	}
	boot := raft.Configuration{Servers: []raft.Server{{ID: "a", Address: "a"}, {ID: "b", Address: "b"}}}
	if err := raft.BootstrapCluster(conf("a"), stores["a"], stores["a"], raft.NewInmemSnapshotStore(), trans["a"], boot); err != nil {
		t.Fatal(err)
	}
	if err := raft.BootstrapCluster(conf("b"), stores["b"], stores["b"], raft.NewInmemSnapshotStore(), trans["b"], boot); err != nil {
		t.Fatal(err)
	}
	a, b := start("a", stores["a"], trans["a"]), start("b", stores["b"], trans["b"])
	leader := waitLeaderOf(t, a.r, b.r)
	apply := func(n int) {
		for i := range n {
			if err := leader.Apply(fmt.Appendf(nil, "cmd %d", i), time.Second).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	apply(40)
	if err := leader.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	snap := leader.LastIndex()
	apply(10) // the leader's log now starts after snap-TrailingLogs and ends at snap+10

	// f holds a log of stale entries 1..snap+3 of term 1, as a leader deposed in term 1
	// would: its entry at snap conflicts with the snapshot's.
	var stale []*raft.Log
	for i := uint64(1); i <= snap+3; i++ {
		stale = append(stale, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("stale")})
	}
	if err := stores["f"].StoreLogs(stale); err != nil {
		t.Fatal(err)
	}
	f := start("f", stores["f"], trans["f"])
	if err := leader.AddVoter("f", "f", 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	want := leader.LastIndex()
	deadline := time.Now().Add(10 * time.Second)
	for f.r.AppliedIndex() < want {
		if time.Now().After(deadline) {
			t.Fatalf("follower applied %d of %d after 10 s: stuck re-installing the snapshot at %d (hashicorp/raft#697)", f.r.AppliedIndex(), want, snap)
		}
		time.Sleep(10 * time.Millisecond)
	}
	lead := a
	if leader == b.r {
		lead = b
	}
	if got, want := len(f.fsm.Logs()), len(lead.fsm.Logs()); got != want || string(f.fsm.Logs()[got-1]) != "cmd 9" {
		t.Fatalf("follower's FSM holds %d commands, the leader's %d", got, want)
	}
}

func waitLeaderOf(t *testing.T, rs ...*raft.Raft) *raft.Raft {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range rs {
			if r.State() == raft.Leader {
				return r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no leader")
	return nil
}
