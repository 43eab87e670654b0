package node

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/vfs/errorfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// TestC6EveryKeyOneState is docs/cases.md C6 (Mooncake #3006, #2632, #2997): with four in-flight
// slots, 35 keys in uneven concurrent batches and two injected write errors, every key either
// commits or fails saying why (an injected error fails every record of the write it hit: a
// batch's neighbouring records go down in one pwrite), none is in neither state, the metadata
// holds exactly the committed ones, and the wait for a slot is counted.
func TestC6EveryKeyOneState(t *testing.T) {
	// Record writes are held until a batch has been counted waiting for a slot (or a
	// deadline has passed): the batches holding the four slots stay in flight until then.
	gate := make(chan struct{})
	held := func(op errorfs.Op, _ string) error {
		if op == errorfs.OpWrite {
			<-gate
		}
		return nil
	}
	eio := errorfs.Any(held,
		errorfs.FailNth(errorfs.OpWrite, 7, syscall.EIO),
		errorfs.FailNth(errorfs.OpWrite, 20, syscall.EIO))
	cfg := testConfig(t.TempDir())
	cfg.FS = errorfs.Wrap(memfs.New(), eio)
	cfg.Txn.MaxInFlight = 4
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	sizes := []int{1, 7, 3, 9, 2, 5, 8}
	results := make([][]kvoffload.KeyResult, len(sizes))
	var wg sync.WaitGroup
	next := 0
	for b, size := range sizes {
		var keys []string
		for range size {
			keys = append(keys, keyOf("c6", next))
			next++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objects(6, 4096, keys...))
			if err != nil {
				t.Errorf("batch %d: %v", b, err)
			}
			results[b] = res
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for st, _ := n.layerStats(); st.Txn.Waits == 0 && time.Now().Before(deadline); st, _ = n.layerStats() {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	ok, failed, other := 0, 0, 0
	for _, res := range results {
		for _, r := range res {
			switch {
			case r.Outcome.OK():
				ok++
			case r.Outcome == kvoffload.Failed && r.Reason != "":
				failed++
				t.Logf("failed as injected: %s: %s", r.Key, r.Reason)
			default:
				other++
				t.Errorf("%s: %s %q", r.Key, r.Outcome, r.Reason)
			}
		}
	}
	if failed == 0 || other != 0 || ok+failed != 35 {
		t.Fatalf("committed %d, failed %d, other %d; want 35 in all, some failed, none other", ok, failed, other)
	}
	if got := n.FSM().Stats().Keys; got != ok {
		t.Fatalf("metadata holds %d keys, want the %d committed", got, ok)
	}
	if st, _ := n.layerStats(); st.Txn.Waits == 0 {
		t.Fatal("no batch waited for an in-flight slot: back-pressure was not exercised or not counted")
	}
	checkConsistent(t, n)
}

// TestTxnIDReusedForAnotherBatch: a call that reuses a running call's txn ID with different
// objects is refused, not handed the other call's results.
func TestTxnIDReusedForAnotherBatch(t *testing.T) {
	// The first record write signals that the first call is running (its txn ID is
	// registered before it writes) and holds it there until the second call has returned.
	writing, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	hold := func(op errorfs.Op, _ string) error {
		if op == errorfs.OpWrite && first.CompareAndSwap(false, true) {
			close(writing)
			<-release
		}
		return nil
	}
	cfg := testConfig(t.TempDir())
	cfg.FS = errorfs.Wrap(memfs.New(), hold)
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	id := kvoffload.NewTxnID()
	done := make(chan error, 1)
	go func() {
		_, err := n.BatchOffload(context.Background(), id, objects(1, 4096, keyOf("a", 0)))
		done <- err
	}()
	select {
	case <-writing:
	case err := <-done:
		t.Fatalf("the first call returned before it wrote its record: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := n.BatchOffload(ctx, id, objects(1, 4096, keyOf("b", 0), keyOf("b", 1)))
	close(release)
	if !errors.Is(err, txn.ErrTxnIDInUse) {
		t.Fatalf("reuse of a running txn ID for another batch: err = %v, want ErrTxnIDInUse", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestOverlongKeyRejectedAlone: a key over the limit is Rejected on its own; the limit cannot
// be configured above what a bucket record holds.
func TestOverlongKeyRejectedAlone(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Txn.MaxKeyBytes = 4096
	if err := cfg.Txn.Validate(); err == nil {
		t.Fatal("MaxKeyBytes above the bucket record's key limit was accepted")
	}
	n := mustOpen(t, testConfig(t.TempDir()))
	defer mustClose(t, n)
	long := keyOf("long", 0) + strings.Repeat("x", 2000)
	res, err := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objects(1, 4096, keyOf("short", 0), long))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Outcome != kvoffload.Stored || res[1].Outcome != kvoffload.Rejected {
		t.Fatalf("short %s (%s), long %s (%s); want Stored, Rejected", res[0].Outcome, res[0].Reason, res[1].Outcome, res[1].Reason)
	}
}

// TestTxnResultsPruned: the leader prunes transaction results older than RetainTxnResults
// log entries, so the de-duplication table stays bounded; a retry of a pruned transaction is
// answered as a new one (AlreadyStored), never applied twice.
func TestTxnResultsPruned(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RetainTxnResults = 20
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	first := kvoffload.NewTxnID()
	objs := objects(1, 4096, keyOf("prune", 0))
	if _, err := n.BatchOffload(context.Background(), first, objs); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 80; i++ {
		mustOffload(t, n, objects(1, 4096, keyOf("prune", i)))
	}
	deadline := time.Now().Add(10 * time.Second)
	for n.FSM().Stats().Txns > 40 {
		if time.Now().After(deadline) {
			t.Fatalf("%d transaction results kept, want about 20", n.FSM().Stats().Txns)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res, err := n.BatchOffload(context.Background(), first, objs)
	if err != nil || res[0].Outcome != kvoffload.AlreadyStored {
		t.Fatalf("retry of a pruned txn: %v %+v", err, res)
	}
	if c := recordsOnDisk(t, n, keyOf("prune", 0)); c != 1 {
		t.Fatalf("%d records on disk for the retried key, want 1", c)
	}
}
