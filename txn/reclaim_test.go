package txn

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
	"github.com/kvoffload/kvoffload/vfs"
	"github.com/kvoffload/kvoffload/vfs/errorfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// stallingDisk is a bucket store over an in-memory FS whose hole punches and file removals
// block, once stall is set, until release is called.
type stallingDisk struct {
	stall   atomic.Bool
	gate    chan struct{} // closed by release: the stalled punch goes on
	stalled chan struct{} // a punch or file removal is waiting on gate
}

func newStallingDisk() *stallingDisk {
	return &stallingDisk{gate: make(chan struct{}), stalled: make(chan struct{}, 1)}
}

func (d *stallingDisk) release() {
	select {
	case <-d.gate:
	default:
		close(d.gate)
	}
}

func (d *stallingDisk) inject(op errorfs.Op, _ string) error {
	if d.stall.Load() && (op == errorfs.OpPunch || op == errorfs.OpRemove) {
		select {
		case d.stalled <- struct{}{}:
		default:
		}
		<-d.gate
	}
	return nil
}

// newStallingCoordinator is a recovered coordinator over a stallingDisk, with one key "k"
// stored.
func newStallingCoordinator(t *testing.T) (*Coordinator, *txntest.Meta, *bucketstore.Store, *stallingDisk) {
	t.Helper()
	return newStallingCoordinatorCap(t, 0)
}

// newStallingCoordinatorCap is newStallingCoordinator with a quota of capacity bytes (0:
// none) and a 300 ms CommitTimeout.
func newStallingCoordinatorCap(t *testing.T, capacity int64) (*Coordinator, *txntest.Meta, *bucketstore.Store, *stallingDisk) {
	t.Helper()
	d := newStallingDisk()
	cfg := bucketstore.DefaultConfig("/b")
	cfg.FS, cfg.Capacity = errorfs.Wrap(memfs.New(), d.inject), capacity
	data, err := bucketstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := txntest.NewMeta()
	tc := DefaultConfig("n1")
	tc.CommitTimeout, tc.Capacity = 300*time.Millisecond, capacity
	c, err := New(tc, &memLog{}, data, m)
	if err != nil {
		t.Fatal(err)
	}
	m.FSM.Watch(c.OnApplied)
	m.FSM.WatchRestore(c.OnRestored)
	t.Cleanup(func() { d.release(); c.Close(); data.Close() })
	ctx := context.Background()
	if _, err := c.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 1)}); err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("offload: %v %+v", err, res)
	}
	return c, m, data, d
}

// waitStalled waits until a free is stalled on the disk.
func (d *stallingDisk) waitStalled(t *testing.T) {
	t.Helper()
	select {
	case <-d.stalled:
	case <-time.After(5 * time.Second):
		t.Fatal("the removed key's bytes were never freed")
	}
}

// waitFreed waits until the store holds no live and no allocated bytes.
func waitFreed(t *testing.T, data *bucketstore.Store) {
	t.Helper()
	waitLive(t, data, 0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := data.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.AllocatedBytes == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the disk was released: %d bytes still allocated, want 0", st.AllocatedBytes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestApplyNotBlockedByStalledFree: the FSM's apply does no bucket I/O. A REMOVE of a local
// key is applied while the disk stalls the free of its bytes (the hole punch blocks): the
// apply returns, the metadata no longer has the key, and later applies go on; once the disk
// is released the bytes are freed. Before the reclaimer, OnApplied freed on the apply
// goroutine, so one slow punch stalled apply, WaitApplied and every read index behind it.
func TestApplyNotBlockedByStalledFree(t *testing.T) {
	_, m, data, d := newStallingCoordinator(t)
	e, _ := m.FSM.Lookup("k")
	d.stall.Store(true)
	applied := make(chan struct{})
	go func() {
		m.Apply(fsm.EncodeRemove(fsm.Remove{TxnID: kvoffload.NewTxnID(), Keys: []fsm.KeyGen{{Key: "k", Gen: e.Gen}}}))
		m.Apply(fsm.EncodeAbort(fsm.Abort{TxnID: kvoffload.NewTxnID(), Node: "n1", Reason: "a later command"}))
		close(applied)
	}()
	d.waitStalled(t)
	select {
	case <-applied:
	case <-time.After(5 * time.Second):
		t.Fatal("apply blocked while the free of a removed key's bytes stalls on the disk")
	}
	if _, ok := m.FSM.Lookup("k"); ok {
		t.Fatal("the key is still in the metadata after its REMOVE was applied")
	}
	d.release()
	waitFreed(t, data)
}

// TestRemoveReturnsWhileFreeStalls: Remove waits for the reclaimer only until its context
// ends. With the disk stalling the free, a Remove under a deadline still answers Removed, and
// the bytes are freed once the disk is released.
func TestRemoveReturnsWhileFreeStalls(t *testing.T) {
	c, m, data, d := newStallingCoordinator(t)
	d.stall.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	var res []kvoffload.RemoveResult
	var err error
	go func() {
		res, err = c.Remove(ctx, []string{"k"})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Remove blocked past its deadline while the free stalls on the disk")
	}
	if err != nil || len(res) != 1 || !res[0].Removed {
		t.Fatalf("Remove while the free stalls: %v %+v", err, res)
	}
	if _, ok := m.FSM.Lookup("k"); ok {
		t.Fatal("the key is still in the metadata after Remove")
	}
	d.waitStalled(t)
	d.release()
	waitFreed(t, data)
}

// An offload that must evict returns by its deadline while the evicted keys' free stalls:
// the eviction does not wait for the reclaimer without bound, holding evictor.mu.
func TestEvictingOffloadReturnsWhileFreeStalls(t *testing.T) {
	c, _, _, d := newStallingCoordinatorCap(t, 2*bucketstore.Alignment) // room for two keys
	ctx := context.Background()
	if res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("b", 1)}); err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("offload b: %v %+v", err, res)
	}
	d.stall.Store(true)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() {
		_, _ = c.BatchOffload(cctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("c", 1)})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("an offload that evicts blocked past its deadline while the free stalls")
	}
}

// Close returns while a free stalls: it waits for the record being processed, at most
// closeWait, not for the whole queue.
func TestCloseReturnsWhileFreeStalls(t *testing.T) {
	c, _, _, d := newStallingCoordinator(t)
	d.stall.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Remove(ctx, []string{"k"}); err != nil {
		t.Fatal(err)
	}
	d.waitStalled(t)
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeWait + 3*time.Second):
		t.Fatal("Coordinator.Close blocked behind a stalled free")
	}
}

// partitionedMeta is txntest.Meta whose Barrier fails while cut (no leader reachable).
type partitionedMeta struct {
	*txntest.Meta
	cut atomic.Bool
}

func (m *partitionedMeta) Barrier(context.Context) error {
	if m.cut.Load() {
		return errors.New("no leader (test)")
	}
	return nil
}

// A COMMIT that applied, whose answers were lost and whose result was pruned before the
// background resolver could read it, keeps its bytes: the resolver's ABORT finds the entry
// live and does not free it: freed, the key would read Corrupt, breaking G1.
func TestResolverAfterPruneKeepsCommittedBytes(t *testing.T) {
	fm := &txntest.Meta{FSM: fsm.New(), ApplyAnyway: true}
	m := &partitionedMeta{Meta: fm}
	c, _ := newCoordinatorFor(t, m, fm.FSM)
	ctx := context.Background()
	m.cut.Store(true)
	fm.FailNext(1 << 30)
	_, _ = c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 1)}) // applied, every answer lost
	fm.FailNext(0)
	fm.Apply(fsm.EncodePrune(fsm.Prune{TxnID: kvoffload.NewTxnID(), Before: fm.LastIndex() + 1}))
	m.cut.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().Aborts == 0 && time.Now().Before(deadline) { // the resolver settles with an ABORT
		time.Sleep(20 * time.Millisecond)
	}
	got, err := c.BatchGet(ctx, []string{"k"})
	if err != nil || got[0].Status != kvoffload.Found {
		t.Fatalf("a committed key lost its bytes: %v %+v", err, got)
	}
}

// stalledWithDamage opens a coordinator on the real filesystem behind a stallingDisk, offloads
// keys (one transaction each), damages the record of "bad" on disk, and stalls the disk's
// hole punches and file removals until d.release (called at cleanup too).
func stalledWithDamage(t *testing.T, keys ...string) (*Coordinator, *bucketstore.Store, *fsm.FSM, *stallingDisk) {
	t.Helper()
	d := newStallingDisk()
	dir := t.TempDir()
	cfg := bucketstore.DefaultConfig(dir)
	cfg.FS = errorfs.Wrap(vfs.OSFS{}, d.inject)
	f := fsm.New()
	c, data := openCoordinator(t, &txntest.Meta{FSM: f}, f, cfg)
	t.Cleanup(d.release)
	offloadNamed(t, c, keys...)
	e, _ := f.Lookup("bad")
	damageOnDisk(t, dir, e)
	d.stall.Store(true)
	return c, data, f, d
}

// A read that answers Corrupt returns only once the record's bytes are freed: with the hole
// punch stalled, the BatchGet waits for it, and when it returns the bytes are no longer live.
func TestCorruptReadReturnsWithItsBytesFreed(t *testing.T) {
	c, data, f, d := stalledWithDamage(t, "good", "bad")
	done := make(chan []kvoffload.GetResult, 1)
	go func() {
		got, _ := c.BatchGet(context.Background(), []string{"good", "bad"})
		done <- got
	}()
	select {
	case <-d.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the corrupt record's bytes were never punched")
	}
	select {
	case got := <-done:
		t.Fatalf("BatchGet returned (%s, %s) while its corrupt record's hole punch was stalled", got[0].Status, got[1].Status)
	case <-time.After(100 * time.Millisecond):
	}
	d.release()
	got := <-done
	if got[0].Status != kvoffload.Found || got[1].Status != kvoffload.Corrupt {
		t.Fatalf("good %s, bad %s; want Found and Corrupt", got[0].Status, got[1].Status)
	}
	st, err := data.Stats()
	if err != nil {
		t.Fatal(err)
	}
	good, _ := f.Lookup("good")
	if st.LiveBytes != good.Extent.Length {
		t.Errorf("live bytes %d after the read, want %d (only the good record's)", st.LiveBytes, good.Extent.Length)
	}
}

// A stalled disk does not hold a read that answered Corrupt past CommitTimeout (300 ms
// here), even without a deadline of its own: the wait for its bytes to be freed is bounded.
func TestCorruptReadOnAStalledDiskReturns(t *testing.T) {
	c, _, _, _ := stalledWithDamage(t, "bad")
	start := time.Now()
	got, err := c.BatchGet(context.Background(), []string{"bad"})
	if err != nil || got[0].Status != kvoffload.Corrupt {
		t.Fatalf("BatchGet: %+v %v, want Corrupt", got, err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("the read took %s with the disk stalled, want about CommitTimeout (300 ms)", el)
	}
}
