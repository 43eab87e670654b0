package raftmeta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/third_party/raft"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig("n1", "/tmp/x").Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	if err := (Config{NodeID: "n1", Dir: "d"}).Validate(); err != nil {
		t.Fatalf("zero tunables should take defaults: %v", err)
	}
	cfg := DefaultConfig("", "")
	cfg.LeaderLeaseTimeout = 2 * cfg.HeartbeatTimeout
	cfg.ApplyTimeout = -time.Second
	err := cfg.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{"NodeID", "Dir", "ApplyTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %q does not mention %s", err, want)
		}
	}
	cfg = DefaultConfig("n1", "d")
	cfg.LeaderLeaseTimeout = 2 * cfg.HeartbeatTimeout
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "LeaderLeaseTimeout") {
		t.Fatalf("raft's checks not applied: %v", err)
	}
	if _, err := Open(Config{}, fsm.New()); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Open(Config{}) = %v", err)
	}
}

func TestProposeSingleNode(t *testing.T) {
	n, f := mustOpen(t, testConfig(t, "n1", t.TempDir()))
	mustLead(t, n)

	r := mustPropose(t, n, commitCmd(1, "a", 7))
	if r.TxnID != txnID(1) || len(r.Keys) != 1 || r.Keys[0].Outcome != fsm.OutcomeStored {
		t.Fatalf("result %+v", r)
	}
	if e, ok := f.Lookup("a"); !ok || e.Owner != "n1" || e.Sum != 7 {
		t.Fatalf("Lookup(a) = %+v, %v", e, ok)
	}
	if r2 := mustPropose(t, n, commitCmd(2, "a", 8)); r2.Keys[0].Outcome != fsm.OutcomeConflict {
		t.Fatalf("second writer: %+v", r2)
	}

	// Re-proposing a TxnID returns the original result, whatever the command says.
	again := mustPropose(t, n, fsm.EncodeAbort(fsm.Abort{TxnID: txnID(1), Node: "n1"}))
	if again.Index != r.Index || again.Type != fsm.CmdCommit || again.Aborted {
		t.Fatalf("re-proposal returned %+v, want the original %+v", again, r)
	}
	if n.AppliedIndex() < r.Index || f.AppliedIndex() != again.Index+2 {
		t.Fatalf("applied: raft %d fsm %d, result index %d", n.AppliedIndex(), f.AppliedIndex(), r.Index)
	}

	if _, err := n.Propose(context.Background(), []byte{99, 1}); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("garbage command: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.Propose(ctx, commitCmd(3, "b", 1)); !errors.Is(err, context.Canceled) || errors.Is(err, ErrIndeterminate) {
		t.Fatalf("cancelled ctx: %v", err)
	}
}

func TestBarrierAndClose(t *testing.T) {
	n, f := mustOpen(t, testConfig(t, "n1", t.TempDir()))
	mustLead(t, n)
	for i := range 20 {
		n.raft.Apply(commitCmd(i, fmt.Sprint("k", i), 1), time.Second) // fire and forget
	}
	if err := n.Barrier(context.Background()); err != nil {
		t.Fatalf("Barrier: %v", err)
	}
	if got := f.Stats().Keys; got != 20 {
		t.Fatalf("after Barrier %d keys applied, want 20", got)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := n.Propose(context.Background(), commitCmd(99, "z", 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Propose after Close: %v", err)
	}
	if err := n.Barrier(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Barrier after Close: %v", err)
	}
	if err := n.WaitLeader(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitLeader after Close: %v", err)
	}
}

// TestRestartFromSnapshotAndLog proposes enough for automatic snapshots and
// log truncation, then restarts on the same directory: the FSM is restored
// from the snapshot, the log tail is replayed, and the Hash matches.
func TestRestartFromSnapshotAndLog(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, "n1", dir)
	cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval = 16, 4, 20*time.Millisecond
	n, f := mustOpen(t, cfg)
	mustLead(t, n)
	for i := range 100 {
		mustPropose(t, n, commitCmd(i, fmt.Sprint("k", i%40), uint64(i%40)))
	}
	snapDir := filepath.Join(dir, "snapshots")
	testkit.Eventually(t, 10*time.Second, "a snapshot that compacts the log", func() bool {
		first, err := n.store.FirstIndex()
		return len(listSnapshots(t, snapDir)) > 0 && err == nil && first > 1
	})
	// No more automatic snapshots: the entries below stay a log tail that
	// the restart must replay on top of the snapshot.
	rc := n.raft.ReloadableConfig()
	rc.SnapshotThreshold = 1 << 20
	if err := n.raft.ReloadConfig(rc); err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 105; i++ { // a log tail after the snapshot, replayed on restart
		mustPropose(t, n, commitCmd(i, fmt.Sprint("tail", i), 1))
	}
	want, wantStats := f.Hash(), f.Stats()
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	snapIndex := snapshotIndex(t, n)
	first, last := logBounds(t, filepath.Join(dir, "raft.db"))
	t.Logf("snapshots %v, log [%d, %d], snapshot index %d", listSnapshots(t, snapDir), first, last, snapIndex)
	if first <= 1 || first > snapIndex+1 || last <= snapIndex || wantStats.AppliedIndex <= snapIndex {
		t.Fatalf("log [%d, %d], snapshot %d, applied %d: want a truncated log with a tail after the snapshot",
			first, last, snapIndex, wantStats.AppliedIndex)
	}

	cfg.SnapshotThreshold = 1 << 20 // no new snapshot while we compare
	n2, f2 := mustOpen(t, cfg)
	if got := f2.AppliedIndex(); got < snapIndex {
		t.Fatalf("after Open the FSM is at %d, want the snapshot index %d or later", got, snapIndex)
	}
	mustLead(t, n2)
	if f2.Hash() != want || f2.Stats() != wantStats {
		t.Fatalf("after restart: %+v hash %x, want %+v hash %x", f2.Stats(), f2.Hash(), wantStats, want)
	}
	r := mustPropose(t, n2, commitCmd(1, "k1", 1)) // an old TxnID is still de-duplicated
	if r.TxnID != txnID(1) || r.Index >= snapIndex {
		t.Fatalf("re-proposed old txn after restart: %+v", r)
	}
	if err := n2.Snapshot(); err != nil {
		t.Fatalf("user snapshot: %v", err)
	}
}

func listSnapshots(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			names = append(names, e.Name())
		}
	}
	return names
}

// snapshotIndex returns the index of the newest snapshot in n's directory.
func snapshotIndex(t *testing.T, n *Node) uint64 {
	t.Helper()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(n.cfg.Dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("no snapshots: %v", err)
	}
	return list[0].Index
}

func logBounds(t *testing.T, path string) (first, last uint64) {
	t.Helper()
	s, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if first, err = s.FirstIndex(); err == nil {
		last, err = s.LastIndex()
	}
	if err != nil {
		t.Fatal(err)
	}
	return first, last
}

func TestTCPTransport(t *testing.T) {
	cfg := testConfig(t, "n1", t.TempDir())
	cfg.BindAddr = "127.0.0.1:0"
	n, f := mustOpen(t, cfg)
	mustLead(t, n)
	mustPropose(t, n, commitCmd(1, "a", 1))
	if _, ok := f.Lookup("a"); !ok {
		t.Fatal("not applied")
	}
}

func TestRaftLogsReachSlog(t *testing.T) {
	var buf bytes.Buffer
	cfg := testConfig(t, "n1", t.TempDir())
	lw := &lockedWriter{}
	cfg.Logger = slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	n, _ := mustOpen(t, cfg)
	mustLead(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	out := lw.String()
	if !strings.Contains(out, "component=raft") || !strings.Contains(out, "entering leader state") {
		t.Fatalf("raft's logs did not reach slog:\n%s", out)
	}
	h := newHCLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})), "x")
	if h.IsInfo() || !h.IsWarn() || h.GetLevel().String() != "warn" || h.Named("y").Name() != "x.y" {
		t.Fatalf("level/name mapping wrong: info %v warn %v level %v", h.IsInfo(), h.IsWarn(), h.GetLevel())
	}
}

type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
