package txn

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
)

// lagHoldMeta is a lagging replica (laggingMeta) whose first proposal is held until release
// is closed, so this node's own offload of a key stays in flight.
type lagHoldMeta struct {
	*laggingMeta
	proposing chan struct{}
	release   chan struct{}
	held      atomic.Bool
}

func (m *lagHoldMeta) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	if m.held.CompareAndSwap(false, true) {
		close(m.proposing)
		<-m.release
	}
	return m.laggingMeta.Propose(ctx, cmd)
}

func (m *lagHoldMeta) failReadIndex(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.readIndexErr = err
}

// A key this node is still writing, already acknowledged through another member whose COMMIT
// this replica has not applied yet, is Present: InFlight is confirmed through the read index
// like Absent, since a replica's own view can still say InFlight tens of milliseconds after
// the acknowledgement. When the read index fails, the keys not Present locally are Unknown
// with the reason, never Absent or InFlight, and the prefix stops at the first of them.
func TestExistsInFlightConfirmed(t *testing.T) {
	m := &lagHoldMeta{laggingMeta: &laggingMeta{Meta: txntest.NewMeta(), hidden: map[string]bool{}},
		proposing: make(chan struct{}), release: make(chan struct{})}
	c, _ := newCoordinatorFor(t, m, m.FSM)
	ctx := context.Background()
	done := make(chan []kvoffload.KeyResult, 1)
	go func() {
		res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 1)})
		if err != nil {
			t.Errorf("the held offload: %v", err)
		}
		done <- res
	}()
	select {
	case <-m.proposing:
	case <-time.After(5 * time.Second):
		t.Fatal("the offload never proposed its COMMIT")
	}
	released := false
	defer func() {
		if !released {
			close(m.release)
		}
	}()
	// Another member commits "k" (same bytes) and "p"; this replica has not applied them.
	other := func(key string, b byte) fsm.Entry {
		v := obj(key, b).Value
		return fsm.Entry{Key: key, Extent: fsm.Extent{Bucket: 1, Offset: int64(b) * 4096, Length: 4096}, Size: uint32(len(v)), Sum: xxhashOf(v), Gen: 1}
	}
	m.Apply(fsm.EncodeCommit(fsm.Commit{TxnID: kvoffload.NewTxnID(), Node: "n2",
		Entries: []fsm.Entry{other("k", 1), other("p", 2)}}))
	m.hide("k", "p")
	if ex := c.BatchExists(ctx, []string{"p", "k", "never"}); ex.PrefixPresent != 2 ||
		ex.Keys[0] != kvoffload.Present || ex.Keys[1] != kvoffload.Present || ex.Keys[2] != kvoffload.Absent || ex.Reason != "" {
		t.Fatalf("lagging replica, the read index answering: %+v (want kvoffload.Present kvoffload.Present kvoffload.Absent, prefix 2)", ex)
	}

	m.hide("k", "p")
	m.failReadIndex(errors.New("no leader (test)"))
	ex := c.BatchExists(ctx, []string{"k", "p", "never"})
	for i, p := range ex.Keys {
		if p != kvoffload.Unknown {
			t.Fatalf("key %d with a failed read index: %s, want kvoffload.Unknown (%+v)", i, p, ex)
		}
	}
	if ex.PrefixPresent != 0 || !strings.Contains(ex.Reason, "no leader (test)") {
		t.Fatalf("failed read index: %+v", ex)
	}
	m.failReadIndex(nil)
	c.BatchExists(ctx, []string{"never"}) // catches up: "k" is applied here now
	m.hide("p")
	m.failReadIndex(errors.New("no leader (test)"))
	ex = c.BatchExistsLease(ctx, []string{"k", "p"}, time.Minute)
	if ex.PrefixPresent != 1 || ex.Keys[0] != kvoffload.Present || ex.Keys[1] != kvoffload.Unknown {
		t.Fatalf("present locally, then one not confirmed: %+v", ex)
	}

	m.failReadIndex(nil)
	close(m.release)
	released = true
	if res := <-done; res == nil || res[0].Outcome != kvoffload.AlreadyStored {
		t.Fatalf("the held offload: %+v, want kvoffload.AlreadyStored (the other member's commit came first)", res)
	}
}

// On a replica whose metadata is the only one (an embedded node: ReadIndex is a no-op) the
// answers are unchanged: no key is Unknown, and the in-flight table still answers InFlight.
func TestExistsSingleReplica(t *testing.T) {
	m := newHoldMeta()
	c, _ := newCoordinatorFor(t, m, m.FSM)
	done := startHeld(t, c, m, kvoffload.NewTxnID(), []kvoffload.Object{obj("w", 1)})
	m.Apply(fsm.EncodeCommit(fsm.Commit{TxnID: kvoffload.NewTxnID(), Node: "n1",
		Entries: []fsm.Entry{{Key: "p", Extent: fsm.Extent{Bucket: 1, Length: 4096}, Size: 4, Sum: xxhashOf(obj("p", 2).Value), Gen: 1}}}))
	ex := c.BatchExists(context.Background(), []string{"p", "w", "never"})
	close(m.release)
	<-done
	if ex.PrefixPresent != 1 || ex.Keys[0] != kvoffload.Present || ex.Keys[1] != kvoffload.InFlight || ex.Keys[2] != kvoffload.Absent || ex.Reason != "" {
		t.Fatalf("single replica: %+v, want kvoffload.Present kvoffload.InFlight kvoffload.Absent", ex)
	}
	if got := kvoffload.Unknown.String(); got != "Unknown" {
		t.Fatalf("Unknown.String() = %q", got)
	}
}
