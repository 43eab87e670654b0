package txn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
)

// The owner side of a forwarded read counts a repeated key at every position against
// MaxBatchBytes and hands reserve each distinct key's bytes once, as BatchGet does, so a
// member asking for one 64 MiB key 48 times cannot make it hold 3 GiB.
func TestOwnerReadBounded(t *testing.T) {
	ctx := context.Background()
	m := txntest.NewMeta()
	c, _ := newTestCoordinator(t, m)
	big := kvoffload.Object{Key: "big", Value: make([]byte, 1<<20)}
	if res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{big}); err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("offload: %v %+v", err, res)
	}
	c.cfg.MaxBatchBytes = 4 << 20
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "big"
	}
	if _, err := c.BatchGetLocal(ctx, keys, nil); !errors.Is(err, ErrBatchTooLarge) || !strings.Contains(fmt.Sprint(err), "MaxBatchBytes") {
		t.Fatalf("64 positions of a 1 MiB key under a 4 MiB MaxBatchBytes: %v, want ErrBatchTooLarge naming MaxBatchBytes", err)
	}
	var reserved int64
	res, err := c.BatchGetLocal(ctx, keys[:3], func(n int64) error { reserved += n; return nil })
	if err != nil || len(res) != 3 || res[2].Status != kvoffload.Found || len(res[2].Value) != 1<<20 {
		t.Fatalf("3 positions: %v %+v", err, res)
	}
	if reserved != 1<<20 {
		t.Fatalf("reserved %d bytes for 3 positions of one 1 MiB key, want %d", reserved, 1<<20)
	}
	if _, err := c.BatchGetLocal(ctx, []string{"big"}, func(int64) error { return errors.New("budget (test)") }); err == nil || !strings.Contains(err.Error(), "budget (test)") {
		t.Fatalf("a refused reservation: %v", err)
	}
}

// With the leader unreachable, the owner still answers the keys it holds before the asking
// member's deadline, a miss in the same read notwithstanding: the confirmation of its misses
// takes at most half the time left, and the misses are Unavailable, never NotFound.
func TestOwnerReadWithAStalledLeader(t *testing.T) {
	m := &stallingMeta{Meta: txntest.NewMeta()}
	c, _ := newCoordinatorFor(t, m, m.FSM)
	if res, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{obj("held", 1)}); err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("offload: %v %+v", err, res)
	}
	m.stalled.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := c.BatchGetLocal(ctx, []string{"held", "missing"}, nil)
	if took := time.Since(start); took > 300*time.Millisecond {
		t.Fatalf("the owner answered after %s of a 400ms deadline", took)
	}
	if err != nil || res[0].Status != kvoffload.Found || res[1].Status != kvoffload.Unavailable {
		t.Fatalf("held and missing with a stalled leader: %v %+v", err, res)
	}
}

// stallingMeta's read index waits for its context once stalled is set (a paused leader).
type stallingMeta struct {
	*txntest.Meta
	stalled atomic.Bool
}

func (m *stallingMeta) ReadIndex(ctx context.Context) error {
	if m.stalled.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// staleOwnerMeta shows key as another node's until a read index brings it up to date, when
// the key turns out to be gone.
type staleOwnerMeta struct {
	*txntest.Meta
	key      string
	caughtUp bool
}

func (m *staleOwnerMeta) ReadIndex(context.Context) error { m.caughtUp = true; return nil }

func (m *staleOwnerMeta) Lookup(k string) (fsm.Entry, bool) {
	if k == m.key && !m.caughtUp {
		return fsm.Entry{Key: k, Owner: "n2", Gen: 1, Size: 4}, true
	}
	return m.Meta.Lookup(k)
}

// A key this node's metadata gives to another node, and that is gone once it has caught up,
// is NotFound, not Unavailable "not owned".
func TestOwnerReadOfAKeyGoneMeanwhile(t *testing.T) {
	m := &staleOwnerMeta{Meta: txntest.NewMeta(), key: "g"}
	c, _ := newCoordinatorFor(t, m, m.FSM)
	res, err := c.BatchGetLocal(context.Background(), []string{"g"}, nil)
	if err != nil || res[0].Status != kvoffload.NotFound || !m.caughtUp {
		t.Fatalf("a key gone meanwhile: %v %+v (caught up %v)", err, res, m.caughtUp)
	}
}

// foreignMeta shows key as n2's, with size bytes and an extent no record has: the owner side
// of a read must answer it Unavailable without counting its size or repairing it.
type foreignMeta struct {
	*txntest.Meta
	key  string
	size uint32
}

func (m *foreignMeta) Lookup(k string) (fsm.Entry, bool) {
	if k == m.key {
		return fsm.Entry{Key: k, Owner: "n2", Gen: 1, Size: m.size, Extent: fsm.Extent{Bucket: 1, Offset: 3}}, true
	}
	return m.Meta.Lookup(k)
}

// A key the metadata gives to another node counts neither against MaxBatchBytes nor in the
// reservation on the owner's side, and is not repaired as corrupt: it is never read there
// (a 3 MiB key of n2 must not fail the whole read under a 2 MiB MaxBatchBytes).
func TestOwnerReadSkipsForeignKeys(t *testing.T) {
	m := &foreignMeta{Meta: txntest.NewMeta(), key: "theirs", size: 3 << 20}
	c, _ := newCoordinatorFor(t, m, m.FSM)
	if res, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{obj("mine", 1)}); err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("offload: %v %+v", err, res)
	}
	c.cfg.MaxBatchBytes = 2 << 20
	var reserved int64
	res, err := c.BatchGetLocal(context.Background(), []string{"theirs", "mine"}, func(n int64) error { reserved += n; return nil })
	if err != nil || res[0].Status != kvoffload.Unavailable || res[1].Status != kvoffload.Found {
		t.Fatalf("a foreign key beside a held one: %v %+v", err, res)
	}
	if reserved != 4 {
		t.Fatalf("reserved %d bytes, want 4 (the held key's)", reserved)
	}
	if got := c.Stats().GetCorrupt; got != 0 {
		t.Fatalf("%d reads counted corrupt, want 0", got)
	}
}
