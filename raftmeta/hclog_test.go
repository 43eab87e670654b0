package raftmeta

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/third_party/raft"
)

// A single node's start logs nothing at warn: its election, with no leader known before, is
// routine, so Raft's "heartbeat timeout reached, starting election" is not a warning then.
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

// Raft's own values (a configuration, a server) reach a JSON log as their %v text, never as
// the {} of a struct without exported fields; numbers and strings stay typed.
func TestHCLogValuesInJSON(t *testing.T) {
	var buf strings.Builder
	lg := newHCLogger(slog.New(slog.NewJSONHandler(&buf, nil)), "raft")
	type opaque struct{ addr string }
	lg.Info("entering leader state", "leader", opaque{"127.0.0.1:7000"}, "term", uint64(7), "id", raft.ServerID("n1"))
	var rec map[string]any
	if err := json.Unmarshal([]byte(buf.String()), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if rec["leader"] != "{127.0.0.1:7000}" || rec["term"] != float64(7) || rec["id"] != "n1" {
		t.Errorf("record %s: want leader as its text, term a number, id a string", buf.String())
	}
}
