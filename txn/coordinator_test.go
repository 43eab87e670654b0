package txn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
	"github.com/kvoffload/kvoffload/vfs/errorfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
	"github.com/kvoffload/kvoffload/wal"
)

// memLog is an in-memory IntentLog.
type memLog struct {
	mu      sync.Mutex
	first   uint64
	entries []wal.Record
}

func (l *memLog) Append(recs ...wal.Record) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first == 0 {
		l.first = 1
	}
	idx := l.first + uint64(len(l.entries))
	l.entries = append(l.entries, recs...)
	return idx, nil
}
func (l *memLog) AppendAsync(recs ...wal.Record) { _, _ = l.Append(recs...) }
func (l *memLog) Sync() error                    { return nil }
func (l *memLog) Replay(fn func(uint64, wal.Record) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, r := range l.entries {
		if err := fn(l.first+uint64(i), r); err != nil {
			return err
		}
	}
	return nil
}
func (l *memLog) FirstIndex() uint64 { l.mu.Lock(); defer l.mu.Unlock(); return max(l.first, 1) }
func (l *memLog) LastIndex() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(l.first, 1) + uint64(len(l.entries)) - 1
}
func (l *memLog) TruncateFront(idx uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = l.entries[idx-l.first:]
	l.first = idx
	return nil
}

func newTestCoordinator(t *testing.T, m *txntest.Meta) (*Coordinator, *bucketstore.Store) {
	t.Helper()
	return newCoordinatorFor(t, m, m.FSM)
}

// newCoordinatorFor opens a recovered coordinator over m, whose commands are applied to f.
func newCoordinatorFor(t *testing.T, m Meta, f *fsm.FSM) (*Coordinator, *bucketstore.Store) {
	t.Helper()
	return newCoordinatorCap(t, m, f, 0)
}

// newCoordinatorCap is newCoordinatorFor with a bucket-store quota of capacity bytes (0: none).
func newCoordinatorCap(t *testing.T, m Meta, f *fsm.FSM, capacity int64) (*Coordinator, *bucketstore.Store) {
	t.Helper()
	cfg := bucketstore.DefaultConfig("/b")
	cfg.FS, cfg.Capacity = memfs.New(), capacity
	return openCoordinator(t, m, f, cfg)
}

// openCoordinator opens a recovered coordinator over m and a bucket store of cfg (its
// Capacity is the coordinator's too).
func openCoordinator(t *testing.T, m Meta, f *fsm.FSM, cfg bucketstore.Config) (*Coordinator, *bucketstore.Store) {
	t.Helper()
	return openCoordinatorOver(t, m, f, cfg, func(s *bucketstore.Store) Buckets { return s })
}

// openCoordinatorOver is openCoordinator with the coordinator's data seam made by wrap from
// the bucket store (a test double around it).
func openCoordinatorOver(t *testing.T, m Meta, f *fsm.FSM, cfg bucketstore.Config, wrap func(*bucketstore.Store) Buckets) (*Coordinator, *bucketstore.Store) {
	t.Helper()
	capacity := cfg.Capacity
	data, err := bucketstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc := DefaultConfig("n1")
	tc.CommitTimeout, tc.Capacity = 300*time.Millisecond, capacity
	c, err := New(tc, &memLog{}, wrap(data), m)
	if err != nil {
		t.Fatal(err)
	}
	f.Watch(c.OnApplied)
	f.WatchRestore(c.OnRestored)
	if _, err := c.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); data.Close() })
	return c, data
}

func obj(key string, b byte) kvoffload.Object {
	return kvoffload.Object{Key: key, Value: []byte{b, b, b, b}}
}

// A COMMIT whose first proposals are lost is proposed again and commits exactly once.
func TestCommitRetriedAfterIndeterminate(t *testing.T) {
	m := txntest.NewMeta()
	c, _ := newTestCoordinator(t, m)
	m.FailNext(2)
	res, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 1)})
	if err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("after two lost proposals: %v %+v", err, res)
	}
}

// A lost proposal that was in fact applied is recognised by txn ID: the retry reports the
// original outcome (Stored), not AlreadyStored.
func TestIndeterminateButApplied(t *testing.T) {
	m := &txntest.Meta{FSM: fsm.New(), ApplyAnyway: true}
	c, _ := newTestCoordinator(t, m)
	m.FailNext(1)
	res, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 1)})
	if err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("applied-but-lost commit: %v %+v", err, res)
	}
}

// When the commit outcome stays unknown past CommitTimeout the call returns ErrIndeterminate;
// a retry with the same txn ID learns the outcome; the background resolver settles the
// extents (freed, since the resolver's ABORT won).
func TestIndeterminateThenRetrySameID(t *testing.T) {
	m := txntest.NewMeta()
	c, data := newTestCoordinator(t, m)
	m.FailNext(1 << 30)
	id := kvoffload.NewTxnID()
	_, err := c.BatchOffload(context.Background(), id, []kvoffload.Object{obj("k", 1)})
	if !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("err = %v, want ErrIndeterminate", err)
	}
	m.FailNext(0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := m.FSM.TxnResult(id); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the resolver never settled the transaction")
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err := c.BatchOffload(context.Background(), id, []kvoffload.Object{obj("k", 1)})
	if err != nil || res[0].Outcome != kvoffload.Failed {
		t.Fatalf("retry of an aborted txn: %v %+v (want kvoffload.Failed: aborted, use a new txn ID)", err, res)
	}
	waitLive(t, data, 0)
	res, err = c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 1)})
	if err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("new txn ID after the abort: %v %+v", err, res)
	}
}

func waitLive(t *testing.T, data *bucketstore.Store, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := data.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.LiveBytes == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("live bytes %d, want %d", st.LiveBytes, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Removed keys' bytes are freed when the REMOVE is applied, not before.
func TestRemoveFreesAfterApply(t *testing.T) {
	m := txntest.NewMeta()
	c, data := newTestCoordinator(t, m)
	if _, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 1)}); err != nil {
		t.Fatal(err)
	}
	m.FailNext(1) // the REMOVE is lost: nothing may be freed
	if _, err := c.Remove(context.Background(), []string{"k"}); err == nil {
		t.Fatal("remove with a lost proposal succeeded")
	}
	if got, _ := c.BatchGet(context.Background(), []string{"k"}); got[0].Status != kvoffload.Found {
		t.Fatalf("key after a lost remove: %s", got[0].Status)
	}
	if _, err := c.Remove(context.Background(), []string{"k"}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, data, 0)
}

// A transaction whose fdatasync failed is never rolled forward by recovery, even when its
// records read back afterwards (fsyncgate): the DATA_FAILED mark in the WAL decides.
func TestDataFailedNeverRolledForward(t *testing.T) {
	mem := memfs.New()
	open := func(inj errorfs.Injector) *bucketstore.Store {
		cfg := bucketstore.DefaultConfig("/b")
		cfg.FS = errorfs.Wrap(mem, inj)
		s, err := bucketstore.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	log := &memLog{}
	m := txntest.NewMeta()
	tc := DefaultConfig("n1")
	tc.CommitTimeout = 200 * time.Millisecond
	data := open(errorfs.FailNth(errorfs.OpSync, 1, errors.New("EIO (test)")))
	c, err := New(tc, log, data, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.FailNext(1 << 30) // the ABORT after the failed sync is lost too: the process "dies"
	res, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 1)})
	if err != nil || res[0].Outcome != kvoffload.Failed {
		t.Fatalf("offload with a failed fdatasync: %v %+v", err, res)
	}
	c.Close()
	data.Close()

	m.FailNext(0)
	data = open(func(errorfs.Op, string) error { return nil }) // the next fdatasync succeeds
	defer data.Close()
	c, err = New(tc, log, data, m)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rep, err := c.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.RolledFwd != 0 || rep.Aborted != 1 {
		t.Fatalf("recovery rolled forward %d and aborted %d intents; want 0 and 1", rep.RolledFwd, rep.Aborted)
	}
	if _, ok := m.FSM.Lookup("k"); ok {
		t.Fatal("a key whose fdatasync failed was committed by recovery")
	}
}

// refusingMeta is txntest.Meta whose COMMITs the leader refuses (this node was removed).
type refusingMeta struct{ *txntest.Meta }

func (m *refusingMeta) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	if typ, _, _ := fsm.Decode(cmd); typ == fsm.CmdCommit {
		return nil, fmt.Errorf("%w: not in the cluster configuration (test)", ErrRefused)
	}
	return m.Meta.Propose(ctx, cmd)
}

// A COMMIT the leader refuses is not proposed again until CommitTimeout: the batch ends at
// once with ErrIndeterminate (the caller retries elsewhere with the same txn ID).
func TestCommitRefusedEndsAtOnce(t *testing.T) {
	m := &refusingMeta{txntest.NewMeta()}
	c, _ := newCoordinatorFor(t, m, m.FSM)
	c.cfg.CommitTimeout = 10 * time.Second
	start := time.Now()
	_, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 1)})
	if !errors.Is(err, ErrIndeterminate) || !errors.Is(err, ErrRefused) {
		t.Fatalf("refused commit: %v, want ErrIndeterminate wrapping ErrRefused", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the refused commit took %s (CommitTimeout 10s): it was retried", d)
	}
}
