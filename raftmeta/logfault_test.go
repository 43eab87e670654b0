package raftmeta

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// TestWaitLeaderEndsOnLogFault: once raft.db cannot be written, Raft is stopped and no
// leader will be known, so WaitLeader returns the fault at once instead of waiting out its
// context (a member starting on a full disk would otherwise wait for a leader forever).
func TestWaitLeaderEndsOnLogFault(t *testing.T) {
	cfg := testConfig(t, "a", t.TempDir())
	cfg.Bootstrap = false // a member that knows no leader: WaitLeader would block
	n, _ := mustOpen(t, cfg)
	_ = n.fault.record(syscall.ENOSPC)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	err := n.WaitLeader(ctx)
	if !errors.Is(err, ErrLogWrite) || !errors.Is(err, syscall.ENOSPC) || time.Since(began) > time.Second {
		t.Fatalf("WaitLeader after a log fault: %v after %s; want ErrLogWrite wrapping ENOSPC at once", err, time.Since(began))
	}
}
