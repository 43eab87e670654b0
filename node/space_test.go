package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/internal/tmpfs"
)

// A node whose data space fills (its whole data directory on a 32 MiB tmpfs, with a 12 MiB
// reserve) refuses further offloads per key with CodeNoSpace, at once and naming the free
// bytes and the reserve; it keeps answering reads, BatchExists and Remove and stays healthy
// (the reserve keeps the WAL and Raft writable); after a Remove it takes offloads again.
func TestNoSpaceRefusedPerKeyAndFreedByRemove(t *testing.T) {
	mnt := tmpfs.Mount(t, "32m")
	cfg := testConfig(filepath.Join(mnt, "data"))
	cfg.SpaceReserve = 12 << 20
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	ctx := context.Background()
	const size = 1 << 20
	seed := testkit.Seed(t)

	var stored []string
	var refused kvoffload.KeyResult
	var took time.Duration
	for b := 0; refused.Key == "" && b < 40; b++ {
		keys := []string{keyOf(fmt.Sprint("fill", b), 0), keyOf(fmt.Sprint("fill", b), 1)}
		start := time.Now()
		res, err := n.BatchOffload(ctx, kvoffload.NewTxnID(), objects(seed, size, keys...))
		took = time.Since(start)
		if err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
		for _, r := range res {
			switch {
			case r.Outcome.OK():
				stored = append(stored, r.Key)
			case r.Code == kvoffload.CodeNoSpace && r.Outcome == kvoffload.Rejected:
				refused = r
			default:
				t.Fatalf("batch %d: %s %s %v %q, want Stored or Rejected (no space)", b, r.Key, r.Outcome, r.Code, r.Reason)
			}
		}
	}
	if refused.Key == "" {
		t.Fatalf("no key refused for want of space after %d stored", len(stored))
	}
	t.Logf("%d MiB stored, then %q refused in %v: %s", len(stored), refused.Key, took, refused.Reason)
	if took > time.Second {
		t.Errorf("the no-space refusal took %v, want under a second", took)
	}
	for _, want := range []string{"bytes free", fmt.Sprintf("reserve %d bytes", cfg.SpaceReserve)} {
		if !strings.Contains(refused.Reason, want) {
			t.Errorf("reason %q does not say %q", refused.Reason, want)
		}
	}
	if len(stored) < 4 {
		t.Fatalf("only %d keys stored before the refusal", len(stored))
	}
	if err := n.Ready(); err != nil {
		t.Fatalf("a node out of data space must stay ready (the reserve keeps the WAL and Raft writable): %v", err)
	}

	checkReadable(t, n, seed, size, stored...)
	ex, err := n.BatchExists(ctx, stored, 0)
	if err != nil || ex.PrefixPresent != len(stored) {
		t.Fatalf("BatchExists: %d of %d present, %v", ex.PrefixPresent, len(stored), err)
	}
	rm, err := n.Remove(ctx, stored[:4])
	if err != nil {
		t.Fatalf("Remove on a full data space: %v", err)
	}
	for _, r := range rm {
		if !r.Removed {
			t.Fatalf("Remove %s: not removed", r.Key)
		}
	}

	// The removed keys' bytes are freed once the removal is applied and punched.
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := n.BatchOffload(ctx, kvoffload.NewTxnID(), objects(seed, size, keyOf("after", 0)))
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Outcome.OK() {
			break
		}
		if res[0].Code != kvoffload.CodeNoSpace || time.Now().After(deadline) {
			t.Fatalf("offload after Remove: %s %v %q", res[0].Outcome, res[0].Code, res[0].Reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
	checkReadable(t, n, seed, size, keyOf("after", 0))
	checkReadable(t, n, seed, size, stored[4:]...)
	if err := n.Ready(); err != nil {
		t.Fatalf("ready after: %v", err)
	}
}

// The reserve grows with the Raft limits and the snapshots; Config.SpaceReserve overrides it.
func TestSpaceReserveFormula(t *testing.T) {
	base := SpaceReserve(8192, 10240, 0)
	want := int64(2*64<<20 + (8192+10240)*4096 + 3*8192*4096)
	if base != want {
		t.Fatalf("SpaceReserve(8192, 10240, 0) = %d, want %d", base, want)
	}
	if got := SpaceReserve(0, 0, 0); got != base {
		t.Fatalf("zero limits mean raftmeta's defaults: %d, want %d", got, base)
	}
	if got := SpaceReserve(8192, 10240, 1<<20); got != base+3<<20 {
		t.Fatalf("a 1 MiB snapshot adds %d, want %d", got-base, 3<<20)
	}
}

// fill writes zeros to path until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			return
		}
	}
}

// A node whose Raft log cannot be written (its filesystem filled past the reserve by another
// writer) fail-stops: Healthy names the Raft log and the full filesystem, Raft is stopped
// (no election loop), and calls are refused at once.
func TestRaftLogFullFailStops(t *testing.T) {
	mnt := tmpfs.Mount(t, "24m")
	cfg := testConfig(filepath.Join(mnt, "data"))
	cfg.SpaceReserve = 4 << 20
	n := mustOpen(t, cfg)
	defer func() { _ = n.Close() }()
	ctx := context.Background()
	seed := testkit.Seed(t)
	mustOffload(t, n, objects(seed, 4<<10, keyOf("k", 0)))
	fill(t, filepath.Join(mnt, "filler"))
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; n.Healthy() == nil; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("still healthy after %d removals on a full filesystem", i)
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, _ = n.Remove(rctx, []string{keyOf("r", i)})
		cancel()
	}
	err := n.Healthy()
	t.Logf("Healthy: %v", err)
	for _, want := range []string{"Raft log", "filesystem is full", "no space left on device"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Healthy %q does not say %q", err, want)
		}
	}
	if err := n.Ready(); err == nil || !strings.Contains(err.Error(), "Raft log") {
		t.Errorf("Ready: %v, want the Raft log named", err)
	}
	testkit.Eventually(t, 10*time.Second, "Raft to stop", func() bool { return n.raft.Raft().State().String() == "Shutdown" })
	start := time.Now()
	_, err = n.BatchOffload(ctx, kvoffload.NewTxnID(), objects(seed, 4<<10, keyOf("after", 0)))
	if err == nil || time.Since(start) > refusalBound {
		t.Errorf("offload on a fail-stopped node: %v after %v, want a refusal within %v", err, time.Since(start), refusalBound)
	}
}

// TestSmallDiskAutoReserve: on a 64 MiB data filesystem the computed reserve (its fixed
// terms alone exceed 64 MiB) is capped at a quarter of the filesystem, so the node takes data
// until the reserve, then refuses per key with CodeNoSpace, and restarts on the full disk
// with every stored key readable.
func TestSmallDiskAutoReserve(t *testing.T) {
	mnt := tmpfs.Mount(t, "64m")
	cfg := testConfig(filepath.Join(mnt, "data"))
	n := mustOpen(t, cfg)
	ctx := context.Background()
	const size = 1 << 20
	seed := testkit.Seed(t)
	var stored []string
	refused := false
	for b := 0; !refused && b < 64; b++ {
		res, err := n.BatchOffload(ctx, kvoffload.NewTxnID(), objects(seed, size, keyOf(fmt.Sprint("small", b), 0)))
		if err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
		switch r := res[0]; {
		case r.Outcome.OK():
			stored = append(stored, r.Key)
		case r.Outcome == kvoffload.Rejected && r.Code == kvoffload.CodeNoSpace:
			refused = true
			t.Logf("%d MiB stored, then: %s", len(stored), r.Reason)
		default:
			t.Fatalf("batch %d: %s %v %q, want Stored or Rejected (no space)", b, r.Outcome, r.Code, r.Reason)
		}
	}
	if !refused || len(stored) < 24 {
		t.Fatalf("refused %v after %d MiB stored; want a no-space refusal after at least 24 MiB of 64", refused, len(stored))
	}
	mustClose(t, n)
	n = mustOpen(t, cfg)
	defer mustClose(t, n)
	checkReadable(t, n, seed, size, stored...)
}
