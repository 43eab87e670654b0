package txn

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
)

// laggingMeta is a replica whose local metadata lags: keys in hidden are missing from Lookup
// until ReadIndex brings it up to date (unless readIndexErr is set).
type laggingMeta struct {
	*txntest.Meta
	mu           sync.Mutex
	hidden       map[string]bool
	readIndexErr error
	readIndexes  atomic.Int64
}

func (m *laggingMeta) hide(keys ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		m.hidden[k] = true
	}
}

func (m *laggingMeta) ReadIndex(context.Context) error {
	m.readIndexes.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.readIndexErr != nil {
		return m.readIndexErr
	}
	clear(m.hidden)
	return nil
}

func (m *laggingMeta) Lookup(k string) (fsm.Entry, bool) {
	m.mu.Lock()
	hidden := m.hidden[k]
	m.mu.Unlock()
	if hidden {
		return fsm.Entry{}, false
	}
	return m.Meta.Lookup(k)
}

// getFunc is one of the coordinator's reads: BatchGet, or BatchGetLocal (the owner's side of
// a forwarded read).
type getFunc func(*Coordinator, context.Context, []string) ([]kvoffload.GetResult, error)

// lagThenGet stores k1 and k2, then reads with get: with everything present (no read index),
// with k1 missing locally (found after one read index), and with k1 missing and the read
// index failing (Unavailable, never NotFound). It returns the coordinator and its metadata.
func lagThenGet(t *testing.T, get getFunc) (*Coordinator, *laggingMeta) {
	t.Helper()
	ctx := context.Background()
	m := &laggingMeta{Meta: txntest.NewMeta(), hidden: map[string]bool{}}
	c, _ := newCoordinatorFor(t, m, m.FSM)
	if res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("k1", 1), obj("k2", 2)}); err != nil || res[0].Outcome != kvoffload.Stored || res[1].Outcome != kvoffload.Stored {
		t.Fatalf("offload: %v %+v", err, res)
	}
	m.readIndexes.Store(0)
	if res, err := get(c, ctx, []string{"k1", "k2"}); err != nil || res[0].Status != kvoffload.Found || res[1].Status != kvoffload.Found {
		t.Fatalf("all present: %v %+v", err, res)
	}
	if n := m.readIndexes.Load(); n != 0 {
		t.Fatalf("a read without misses ran %d read indexes, want 0", n)
	}

	m.hide("k1")
	res, err := get(c, ctx, []string{"k1", "k2", "never"})
	if err != nil || res[0].Status != kvoffload.Found || string(res[0].Value) != "\x01\x01\x01\x01" || res[1].Status != kvoffload.Found || res[2].Status != kvoffload.NotFound {
		t.Fatalf("lagging replica: %v %+v", err, res)
	}
	if n := m.readIndexes.Load(); n != 1 {
		t.Fatalf("read indexes: %d, want 1", n)
	}

	m.hide("k1")
	m.readIndexErr = errors.New("no leader (test)")
	res, err = get(c, ctx, []string{"k1", "k2"})
	if err != nil || res[0].Status != kvoffload.Unavailable || !strings.Contains(res[0].Reason, "no leader (test)") || res[1].Status != kvoffload.Found {
		t.Fatalf("read index failed: %v %+v", err, res)
	}
	m.readIndexErr = nil
	return c, m
}

// A key acknowledged elsewhere but not yet applied here is found after a read index; a
// read whose keys are all present locally does not pay for one; a read index that fails
// leaves the misses Unavailable (BatchGet) or Unknown (BatchExists), never NotFound or Absent.
func TestMissesConfirmedByReadIndex(t *testing.T) {
	ctx := context.Background()
	c, m := lagThenGet(t, (*Coordinator).BatchGet)
	m.hide("k1")
	if ex := c.BatchExists(ctx, []string{"k1", "k2", "never"}); ex.PrefixPresent != 2 || ex.Keys[2] != kvoffload.Absent {
		t.Fatalf("exists on a lagging replica: %+v", ex)
	}
	m.hide("k1")
	m.readIndexErr = errors.New("no leader (test)")
	if ex := c.BatchExists(ctx, []string{"k2", "k1"}); ex.PrefixPresent != 1 || ex.Keys[1] != kvoffload.Unknown || !strings.Contains(ex.Reason, "no leader (test)") {
		t.Fatalf("exists with a failed read index: %+v", ex)
	}
	if got := c.Stats().ReadIndexFailed; got != 2 {
		t.Fatalf("Stats().ReadIndexFailed = %d, want 2", got)
	}
}

// The owner side of a forwarded read confirms its misses too: the requester found the key
// committed in its own metadata, and the owner's may lag it (CI saw C3 read NotFound from an
// owner whose FSM had not yet applied the COMMIT another member had applied).
func TestOwnerReadConfirmsMisses(t *testing.T) {
	lagThenGet(t, func(c *Coordinator, ctx context.Context, keys []string) ([]kvoffload.GetResult, error) {
		return c.BatchGetLocal(ctx, keys, nil)
	})
}

// stuckMeta never completes a read index (a paused leader): it waits for its context.
type stuckMeta struct{ *txntest.Meta }

func (stuckMeta) ReadIndex(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }

// The catch-up at the start of a batch offload is bounded by ReadIndexTimeout, not by the
// caller's deadline: with the leader unreachable (paused, as by SIGSTOP) the call fails
// fast, having written nothing, and the client retries.
func TestOffloadCatchUpBounded(t *testing.T) {
	m := stuckMeta{txntest.NewMeta()}
	c, _ := newCoordinatorFor(t, m, m.FSM)
	c.cfg.ReadIndexTimeout = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 1)})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrIndeterminate) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("offload with no read index: %v, want ErrIndeterminate from the read-index deadline", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the offload waited for the caller's deadline instead of ReadIndexTimeout")
	}
	if _, ok := m.FSM.Lookup("k"); ok {
		t.Fatal("the key was committed")
	}
}
