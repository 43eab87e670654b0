package raftmeta

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/kvoffload/kvoffload/third_party/raft"
)

// A single node's start logs nothing at warn: its election, with no leader known before, is
// routine (it used to log "heartbeat timeout reached, starting election" as a warning).
func TestSingleNodeStartIsQuietAtWarn(t *testing.T) {
	cfg := testConfig(t, "n1", t.TempDir())
	lw := &lockedWriter{}
	cfg.Logger = slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n, _ := mustOpen(t, cfg)
	mustLead(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if out := lw.String(); out != "" {
		t.Errorf("a single node's start and close logged at warn or above:\n%s", out)
	}
}

// routineLevel keeps a lost leader's election a warning and lowers errors of this node's
// transport shutting down.
func TestRoutineLevel(t *testing.T) {
	election := "heartbeat timeout reached, starting election"
	for _, c := range []struct {
		level slog.Level
		msg   string
		args  []any
		want  slog.Level
	}{
		{slog.LevelWarn, election, []any{"last-leader-addr", "", "last-leader-id", raft.ServerID("")}, slog.LevelInfo},
		{slog.LevelWarn, election, []any{"last-leader-addr", "a:1", "last-leader-id", raft.ServerID("n2")}, slog.LevelWarn},
		{slog.LevelError, "failed to decode incoming command", []any{"error", raft.ErrTransportShutdown}, slog.LevelDebug},
		{slog.LevelError, "failed to decode incoming command", []any{"error", fmt.Errorf("read: %w", raft.ErrTransportShutdown)}, slog.LevelDebug},
		{slog.LevelError, "failed to decode incoming command", []any{"error", fmt.Errorf("bad msgpack")}, slog.LevelError},
		{slog.LevelInfo, "entering leader state", nil, slog.LevelInfo},
	} {
		if got := routineLevel(c.level, c.msg, c.args); got != c.want {
			t.Errorf("%v %q %v: %v, want %v", c.level, c.msg, c.args, got, c.want)
		}
	}
}
