//go:build chaos

package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/internal/tmpfs"
	"github.com/kvoffload/kvoffload/node"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/vfs"
	"github.com/kvoffload/kvoffload/vfs/errorfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// The error-path tier (L5; docs/chaos.md, TestErrorPaths): each kind of file operation the bucket store
// performs fails once, with EIO or ENOSPC, at its 1st, 2nd and a seeded later hit, while a
// small workload runs on errorfs.FS (offloads with duplicates and joins, a snapshot,
// a Remove, reads) and while the node recovers on the still-failing filesystem. Every key's
// result must be one of the five outcomes, a failure must say why, no acknowledged key may go
// missing, no read may return wrong bytes; once the fault is gone a recovery must pass the
// checkers. TestRealENOSPC fills a small tmpfs that holds the whole data directory.

// errorOps are the operation kinds the bucket store performs (errorfs.Op).
var errorOps = []errorfs.Op{
	errorfs.OpOpen, errorfs.OpWrite, errorfs.OpSync, errorfs.OpSyncDir,
	errorfs.OpRemove, errorfs.OpTruncate, errorfs.OpPunch, errorfs.OpRead,
}

var errnoNames = map[syscall.Errno]string{syscall.EIO: "EIO", syscall.ENOSPC: "ENOSPC"}

// fault fails the nth operation of kind op with err (err 0: never) and counts every operation
// by kind.
type fault struct {
	op    errorfs.Op
	nth   int64
	err   syscall.Errno
	count [errorfs.OpPunch + 1]atomic.Int64
	fired atomic.Pointer[string] // the file the fault hit
}

func (f *fault) inject(op errorfs.Op, name string) error {
	if op < 0 || int(op) >= len(f.count) {
		return nil
	}
	if n := f.count[op].Add(1); f.err != 0 && op == f.op && n == f.nth {
		f.fired.Store(&name)
		return f.err
	}
	return nil
}

func (f *fault) String() string {
	if f.err == 0 {
		return "no fault"
	}
	return fmt.Sprintf("%s %s@%d", f.op, errnoNames[f.err], f.nth)
}

// ledger is what a workload knows about its keys, and the problems it has seen. A key is
// acked from an OK offload until a Remove reports it removed; an acked key must stay readable
// and must never be reported anything but OK when offloaded again.
type ledger struct {
	w        Workload
	mu       sync.Mutex
	offered  []string
	acked    map[string]bool
	removed  map[string]bool
	results  int
	failures []string // non-OK offload results: "key: outcome (reason)"
	problems []string
}

func newLedger(w Workload) *ledger {
	return &ledger{w: w, acked: map[string]bool{}, removed: map[string]bool{}}
}

func (l *ledger) problemf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

func (l *ledger) objects(keys ...string) []kvoffload.Object {
	objs := make([]kvoffload.Object, len(keys))
	for i, k := range keys {
		objs[i] = kvoffload.Object{Key: k, Value: l.w.Payload(k)}
	}
	return objs
}

// offload offloads keys (duplicates allowed) as one transaction and checks every result. A
// request-level error (nothing accepted) is returned for the caller to judge.
func (l *ledger) offload(ctx context.Context, n *node.Node, keys ...string) error {
	l.mu.Lock()
	wasAcked := map[string]bool{}
	for _, k := range keys {
		if !slices.Contains(l.offered, k) {
			l.offered = append(l.offered, k)
		}
		wasAcked[k] = l.acked[k]
	}
	l.mu.Unlock()
	res, err := n.BatchOffload(ctx, kvoffload.NewTxnID(), l.objects(keys...))
	if err != nil {
		return fmt.Errorf("offload %v: %w", keys, err)
	}
	if len(res) != len(keys) {
		l.problemf("offload %v: %d results", keys, len(res))
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, r := range res {
		l.results++
		switch {
		case r.Key != keys[i]:
			l.problems = append(l.problems, fmt.Sprintf("result %d is for %s, want %s", i, r.Key, keys[i]))
		case r.Outcome == kvoffload.Conflict:
			l.problems = append(l.problems, fmt.Sprintf("%s: Conflict with identical bytes (%s)", r.Key, r.Reason))
		case r.Outcome != kvoffload.Stored && r.Outcome != kvoffload.AlreadyStored && r.Outcome != kvoffload.Rejected && r.Outcome != kvoffload.Failed:
			l.problems = append(l.problems, fmt.Sprintf("%s: outcome %d is none of the five", r.Key, r.Outcome))
		case !r.Outcome.OK() && r.Reason == "":
			l.problems = append(l.problems, fmt.Sprintf("%s: %s without a reason", r.Key, r.Outcome))
		case !r.Outcome.OK() && wasAcked[r.Key]:
			l.problems = append(l.problems, fmt.Sprintf("%s was acknowledged, offloaded again it is %s (%s)", r.Key, r.Outcome, r.Reason))
		case r.Outcome.OK():
			l.acked[r.Key] = true
			delete(l.removed, r.Key)
		}
		if !r.Outcome.OK() {
			l.failures = append(l.failures, fmt.Sprintf("%s: %s (%s)", r.Key, r.Outcome, r.Reason))
		}
	}
	return nil
}

// mustOffload is offload where a request-level error is a problem (bucket faults fail
// keys, never a whole request).
func (l *ledger) mustOffload(ctx context.Context, n *node.Node, keys ...string) {
	if err := l.offload(ctx, n, keys...); err != nil {
		l.problemf("request-level error: %v", err)
	}
}

// remove removes keys; a key reported removed must read NotFound afterwards. Keys whose
// removal is unknown (a request-level error) are no longer tracked as acked.
func (l *ledger) remove(ctx context.Context, n *node.Node, keys ...string) {
	res, err := n.Remove(ctx, keys)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.problems = append(l.problems, fmt.Sprintf("remove %v: %v", keys, err))
		for _, k := range keys {
			delete(l.acked, k)
		}
		return
	}
	for _, r := range res {
		if l.acked[r.Key] && !r.Removed {
			l.problems = append(l.problems, fmt.Sprintf("remove: acknowledged key %s was not removed", r.Key))
		}
		if r.Removed {
			delete(l.acked, r.Key)
			l.removed[r.Key] = true
		}
	}
}

// read reads every key ever offered: acked keys must be Found with their bytes (or
// Unavailable, with a reason, when the read itself failed); removed keys NotFound; no key
// may ever read back wrong bytes.
func (l *ledger) read(ctx context.Context, n *node.Node) {
	l.mu.Lock()
	keys := append([]string(nil), l.offered...)
	l.mu.Unlock()
	res, err := n.BatchGet(ctx, keys)
	if err != nil {
		l.problemf("get: request-level error: %v", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range res {
		l.results++
		switch {
		case r.Status == kvoffload.Found && string(r.Value) != string(l.w.Payload(r.Key)):
			l.problems = append(l.problems, fmt.Sprintf("I3: %s read back wrong bytes", r.Key))
		case r.Status == kvoffload.Unavailable && r.Reason == "":
			l.problems = append(l.problems, fmt.Sprintf("%s: Unavailable without a reason", r.Key))
		case l.acked[r.Key] && r.Status != kvoffload.Found && r.Status != kvoffload.Unavailable:
			l.problems = append(l.problems, fmt.Sprintf("I2: acknowledged key %s reads %s (%s)", r.Key, r.Status, r.Reason))
		case l.removed[r.Key] && r.Status != kvoffload.NotFound:
			l.problems = append(l.problems, fmt.Sprintf("removed key %s reads %s", r.Key, r.Status))
		}
	}
}

func (l *ledger) ackedKeys() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.acked))
}

// errorConfig keeps buckets small (four 16 KiB records each), so the workload creates,
// seals, empties and removes bucket files; it truncates the WAL every few entries and
// snapshots Raft often, so those paths run too.
func errorConfig(dir string, fs vfs.FS) node.Config {
	cfg := memConfig(dir, fs)
	cfg.BucketSize = 96 << 10
	cfg.SnapshotThreshold = 16
	cfg.TrailingLogs = 16
	cfg.Txn.TruncateEvery = 4
	cfg.Txn.CommitTimeout = 5 * time.Second
	return cfg
}

const errorBlock = 16 << 10

// errorRun is what one error case did.
type errorRun struct {
	fault      *fault
	problems   []string
	notes      []string
	recoveries int
	checks     int
}

// runErrorCase runs the workload with f injected into the bucket files, then recovers on the
// bare model filesystem and checks the node. It reports problems instead of failing a test,
// so that cases can run concurrently.
func runErrorCase(dir string, seed uint64, f *fault) errorRun {
	run := errorRun{fault: f}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mem := memfs.New()
	efs := errorfs.Wrap(mem, f.inject)
	l := newLedger(Workload{Seed: seed, BlockSize: errorBlock})
	for i, phase := range []func(context.Context, *node.Node, *ledger) error{errorFirstRun, errorSecondRun} {
		n, err := node.Open(ctx, errorConfig(dir, efs))
		if err != nil {
			run.noteOpen(f, err)
			continue
		}
		run.recoveries += i // the first open finds nothing to recover
		if err := phase(ctx, n, l); err != nil {
			run.notes = append(run.notes, err.Error())
		}
		if err := n.Close(); err != nil {
			run.notes = append(run.notes, "close: "+err.Error())
		}
	}
	run.problems = append(run.problems, l.problems...)

	// The fault is gone.
	n, err := node.Open(ctx, errorConfig(dir, mem))
	if err != nil {
		run.problems = append(run.problems, fmt.Sprintf("recovery without the fault failed: %v", err))
		return run
	}
	run.recoveries++
	rep, cerr := CheckNode(ctx, n, l.w, l.ackedKeys())
	if err := n.Close(); err != nil {
		run.problems = append(run.problems, fmt.Sprintf("close after recovery: %v", err))
	}
	if cerr != nil {
		run.problems = append(run.problems, fmt.Sprintf("invariant violated after recovery: %v", cerr))
	}
	if open, err := UnresolvedIntents(filepath.Join(dir, "wal")); err != nil || open != 0 {
		run.problems = append(run.problems, fmt.Sprintf("I5: %d unresolved intents after recovery (err %v)", open, err))
	}
	run.checks = rep.Checks + 1 + l.results
	return run
}

func errKey(b, i int) string { return fmt.Sprintf("err@b:%d@i:%d", b, i) }

// errorFirstRun runs on a fresh node: six batches of three new keys with a duplicate in the
// batch and a key of the previous batch, one of them offloaded by two racing transactions
// (one writes, the other joins); a Raft snapshot; a Remove that empties the first two
// buckets (their files are removed) and leaves dead tails in later ones (recovery truncates
// them); reads.
func errorFirstRun(ctx context.Context, n *node.Node, l *ledger) error {
	for b := range 6 {
		keys := []string{errKey(b, 0), errKey(b, 1), errKey(b, 2), errKey(b, 0)}
		if b > 0 {
			keys = append(keys, errKey(b-1, 1))
		}
		if b == 2 {
			var wg sync.WaitGroup
			wg.Go(func() { l.mustOffload(ctx, n, keys...) })
			wg.Go(func() { l.mustOffload(ctx, n, keys...) })
			wg.Wait()
			continue
		}
		l.mustOffload(ctx, n, keys...)
	}
	err := n.Snapshot()
	l.remove(ctx, n, errKey(0, 0), errKey(0, 1), errKey(0, 2), errKey(1, 0), errKey(1, 1), errKey(1, 2),
		errKey(2, 0), errKey(2, 1), errKey(2, 2), errKey(3, 2), errKey(5, 0), errKey(5, 2))
	l.read(ctx, n)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// errorSecondRun runs after a recovery on the failing filesystem: reads, an offload (one
// key again after its removal), a Remove, reads.
func errorSecondRun(ctx context.Context, n *node.Node, l *ledger) error {
	l.read(ctx, n)
	l.mustOffload(ctx, n, errKey(9, 0), errKey(9, 1), errKey(2, 1))
	l.remove(ctx, n, errKey(9, 0))
	l.read(ctx, n)
	return nil
}

// noteOpen records a node that refused to open on the failing filesystem: that is a clean
// outcome only if the error carries the injected errno.
func (r *errorRun) noteOpen(f *fault, err error) {
	if f.err == 0 || !errors.Is(err, f.err) {
		r.problems = append(r.problems, fmt.Sprintf("open failed without the injected error in its chain: %v", err))
		return
	}
	r.notes = append(r.notes, fmt.Sprintf("open refused: %v", err))
}

// TestErrorPaths is the L5 tier: see the comment at the top of this file. A fault-free run
// first counts the operations of each kind, so the later hit (a seeded one of the 3rd to
// 10th) is one the workload reaches.
func TestErrorPaths(t *testing.T) {
	seed := testkit.Seed(t)
	t.Cleanup(failpoint.Reset) // in-process hits must not shift the @N of later tiers
	rng := rand.New(rand.NewPCG(seed, 5))
	base := &fault{}
	run := runErrorCase(filepath.Join(t.TempDir(), "data"), seed, base)
	if len(run.problems) > 0 {
		t.Fatalf("the fault-free run failed:\n%s", strings.Join(run.problems, "\n"))
	}
	totals.recoveries += run.recoveries
	totals.checks += run.checks
	for _, op := range errorOps {
		count := base.count[op].Load()
		if count == 0 {
			t.Errorf("the workload never performs %s", op)
			continue
		}
		hits := []int64{1}
		if count >= 2 {
			hits = append(hits, 2)
		}
		if count >= 3 {
			hits = append(hits, min(count, 3+rng.Int64N(8)))
		}
		var faults []*fault
		for _, errno := range []syscall.Errno{syscall.EIO, syscall.ENOSPC} {
			for _, nth := range hits {
				faults = append(faults, &fault{op: op, err: errno, nth: nth})
			}
		}
		t.Run(op.String(), func(t *testing.T) { runErrorCases(t, seed, faults) })
	}
}

// runErrorCases runs the cases concurrently (each mostly waits on Raft elections) and
// reports each in its own subtest.
func runErrorCases(t *testing.T, seed uint64, faults []*fault) {
	runs := make([]errorRun, len(faults))
	dirs := make([]string, len(faults))
	for i := range faults {
		dirs[i] = filepath.Join(t.TempDir(), "data")
	}
	var wg sync.WaitGroup
	for i, f := range faults {
		wg.Go(func() { runs[i] = runErrorCase(dirs[i], seed, f) })
	}
	wg.Wait()
	for _, run := range runs {
		f := run.fault
		t.Run(fmt.Sprintf("%s@%d", errnoNames[f.err], f.nth), func(t *testing.T) {
			totals.recoveries += run.recoveries
			totals.checks += run.checks
			if p := f.fired.Load(); p != nil {
				t.Logf("%s hit %s", f, *p)
			} else {
				t.Logf("%s: the workload made only %d %s calls", f, f.count[f.op].Load(), f.op)
			}
			for _, n := range run.notes {
				t.Log(n)
			}
			for _, p := range run.problems {
				t.Error(p)
			}
		})
	}
}

// TestRealENOSPC runs the node with its whole data directory (WAL, buckets, Raft) on a
// 40 MiB tmpfs and offloads until bucket writes fail, then takes the last free pages with a
// second filler file and offloads more, so that WAL and Raft appends fail too. Writes must
// fail cleanly (keys Failed with a reason, or the node fail-stops), acknowledged keys must
// stay readable, and after space is freed (a filler file made first is deleted) recovery must
// pass the checkers and the node must store again.
func TestRealENOSPC(t *testing.T) {
	seed := testkit.Seed(t)
	t.Cleanup(failpoint.Reset) // in-process hits must not shift the @N of later tiers
	mnt := tmpfs.Mount(t, "40m")
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 6<<20), 0o640); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "data")
	cfg := node.DefaultConfig(dir)
	cfg.BucketSize = 8 << 20
	cfg.SpaceReserve = -1 // no reserve: the bucket, WAL and Raft writes themselves meet ENOSPC
	cfg.Txn.CommitTimeout = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := node.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger(Workload{Seed: seed, BlockSize: 1 << 20})
	fillNode(ctx, t, n, l, filepath.Join(mnt, "filler2"))
	if err := n.Close(); err != nil {
		t.Logf("close on a full filesystem: %v", err)
	}
	for _, p := range l.problems {
		t.Error(p)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	n, err = node.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("recovery after freeing space failed: %v", err)
	}
	totals.recoveries++
	failed := len(l.failures)
	if err := l.offload(ctx, n, "enospc@after:0", "enospc@after:1"); err != nil || len(l.failures) > failed {
		t.Errorf("offload after recovery with space freed: %v %v", err, l.failures[failed:])
	}
	rep, cerr := CheckNode(ctx, n, l.w, l.ackedKeys())
	if err := n.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if cerr != nil {
		t.Fatalf("invariant violated after recovery: %v", cerr)
	}
	if open, err := UnresolvedIntents(filepath.Join(dir, "wal")); err != nil || open != 0 {
		t.Fatalf("I5: %d unresolved intents after recovery (err %v)", open, err)
	}
	totals.checks += rep.Checks + 1
}

// fillNode offloads batches of 4 x 1 MiB until bucket writes fail, reads, then takes the
// last free pages with the file filler and goes on until the node fail-stops (a WAL or Raft
// append failed) or 200 more batches were refused key by key.
func fillNode(ctx context.Context, t *testing.T, n *node.Node, l *ledger, filler string) {
	batch := func(b int) error {
		keys := make([]string, 4)
		for i := range keys {
			keys[i] = fmt.Sprintf("enospc@b:%d@i:%d", b, i)
		}
		err := l.offload(ctx, n, keys...)
		if err != nil && !errors.Is(err, txn.ErrFailed) { // a fail-stop is a clean refusal
			t.Errorf("batch %d: request-level error that is not a fail-stop: %v", b, err)
		}
		return err
	}
	full := -1
	for b := 0; b < 64 && full < 0; b++ {
		_ = batch(b)
		if len(l.failures) > 0 {
			full = b
		}
	}
	if full < 0 {
		t.Fatal("64 batches of 4 MiB did not fill a 40 MiB tmpfs")
	}
	t.Logf("bucket writes fail from batch %d on: %d keys acknowledged; first failure: %s",
		full, len(l.ackedKeys()), l.failures[0])
	l.read(ctx, n)
	t.Logf("the rest of the tmpfs: %v", fillUp(filler))
	for b := full + 1; b < full+200; b++ {
		if err := batch(b); err != nil {
			t.Logf("batch %d: %v", b, err)
			break
		}
	}
	if _, err := n.BatchGet(ctx, nil); !errors.Is(err, txn.ErrFailed) {
		l.read(ctx, n)
	}
}

// fillUp writes name until the filesystem is full and returns the error that stopped it.
func fillUp(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
}
