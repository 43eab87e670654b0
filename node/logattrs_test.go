package node

import (
	"log/slog"
	"strings"
	"testing"
)

// Each record of a node's start and close names the node once: raftmeta and txn add the
// node themselves, so they are given the configured logger, not the node's.
func TestLogRecordsNameTheNodeOnce(t *testing.T) {
	cfg := testConfig(t.TempDir())
	lw := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n := mustOpen(t, cfg)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	out := lw.String()
	if !strings.Contains(out, "component=raftmeta") || !strings.Contains(out, "pkg=txn") {
		t.Fatalf("no raftmeta or txn records:\n%s", out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if c := strings.Count(line, " node="); c > 1 {
			t.Errorf("%d node attributes: %s", c, line)
		}
	}
}
