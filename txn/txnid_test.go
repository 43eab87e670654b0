package txn

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
)

// value returns n bytes of b.
func value(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// offloadOK offloads objs under id and fails the test on a request-level error.
func offloadOK(t *testing.T, c *Coordinator, id fsm.TxnID, objs []kvoffload.Object) []kvoffload.KeyResult {
	t.Helper()
	res, err := c.BatchOffload(context.Background(), id, objs)
	if err != nil {
		t.Fatalf("offload of %d objects: %v", len(objs), err)
	}
	return res
}

// wantValue fails the test unless key reads back as want.
func wantValue(t *testing.T, c *Coordinator, key string, want []byte) {
	t.Helper()
	got, err := c.BatchGet(context.Background(), []string{key})
	if err != nil || got[0].Status != kvoffload.Found || !bytes.Equal(got[0].Value, want) {
		t.Fatalf("get %q: %v %s %.8q, want %.8q", key, err, got[0].Status, got[0].Value, want)
	}
}

// A finished txn ID reused for other bytes of the same length is refused, and the key keeps
// the bytes first stored.
func TestFinishedTxnIDOtherBytesSameLength(t *testing.T) {
	m := txntest.NewMeta()
	c, _ := newTestCoordinator(t, m)
	id := kvoffload.NewTxnID()
	a, b := value('A', 4096), value('B', 4096)
	if res := offloadOK(t, c, id, []kvoffload.Object{{Key: "k", Value: a}}); res[0].Outcome != kvoffload.Stored {
		t.Fatalf("first offload: %+v", res)
	}
	res, err := c.BatchOffload(context.Background(), id, []kvoffload.Object{{Key: "k", Value: b}})
	if !errors.Is(err, ErrTxnIDInUse) {
		t.Fatalf("finished txn ID with other bytes: %v %+v, want ErrTxnIDInUse", err, res)
	}
	wantValue(t, c, "k", a)
}

// A finished txn ID reused for a value of another length is refused.
func TestFinishedTxnIDOtherLength(t *testing.T) {
	m := txntest.NewMeta()
	c, _ := newTestCoordinator(t, m)
	id := kvoffload.NewTxnID()
	a := value('A', 4096)
	offloadOK(t, c, id, []kvoffload.Object{{Key: "k", Value: a}})
	for _, v := range [][]byte{a[:100], value('A', 5000)} {
		res, err := c.BatchOffload(context.Background(), id, []kvoffload.Object{{Key: "k", Value: v}})
		if !errors.Is(err, ErrTxnIDInUse) {
			t.Fatalf("finished txn ID with %d bytes instead of 4096: %v %+v, want ErrTxnIDInUse", len(v), err, res)
		}
	}
	wantValue(t, c, "k", a)
}

// A finished txn ID reused for a batch without one of the keys it wrote is refused; one with
// an extra key cannot be told from the original (keys not written are not recorded) and
// learns that key's standing without storing it.
func TestFinishedTxnIDOtherKeys(t *testing.T) {
	m := txntest.NewMeta()
	c, _ := newTestCoordinator(t, m)
	id := kvoffload.NewTxnID()
	offloadOK(t, c, id, []kvoffload.Object{obj("k1", 1), obj("k2", 2)})
	if _, err := c.BatchOffload(context.Background(), id, []kvoffload.Object{obj("k1", 1)}); !errors.Is(err, ErrTxnIDInUse) {
		t.Fatalf("retry without k2: %v, want ErrTxnIDInUse", err)
	}
	res, err := c.BatchOffload(context.Background(), id, []kvoffload.Object{obj("k1", 1), obj("k2", 2), obj("k3", 3)})
	if err != nil || res[0].Outcome != kvoffload.Stored || res[1].Outcome != kvoffload.Stored || res[2].Outcome != kvoffload.Failed {
		t.Fatalf("retry with an extra key: %v %+v", err, res)
	}
	if _, ok := m.FSM.Lookup("k3"); ok {
		t.Fatal("a key added to a retried batch was stored")
	}
}

// The ID of a command that is not an offload (here a REMOVE) is refused for a batch.
func TestTxnIDOfAnotherCommand(t *testing.T) {
	m := txntest.NewMeta()
	c, _ := newTestCoordinator(t, m)
	id := kvoffload.NewTxnID()
	m.Apply(fsm.EncodeRemove(fsm.Remove{TxnID: id, Keys: []fsm.KeyGen{{Key: "k"}}}))
	if _, err := c.BatchOffload(context.Background(), id, []kvoffload.Object{obj("k", 1)}); !errors.Is(err, ErrTxnIDInUse) {
		t.Fatalf("offload under a REMOVE's txn ID: %v, want ErrTxnIDInUse", err)
	}
}

// holdMeta holds the first proposal until release is closed, so a call stays running.
type holdMeta struct {
	*txntest.Meta
	proposing chan struct{}
	release   chan struct{}
	held      bool
}

func (m *holdMeta) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	if !m.held { // only the first call's goroutine proposes before release
		m.held = true
		close(m.proposing)
		<-m.release
	}
	return m.Meta.Propose(ctx, cmd)
}

// goOffload offloads objs under id in a goroutine and sends its results.
func goOffload(t *testing.T, c *Coordinator, id fsm.TxnID, objs []kvoffload.Object) <-chan []kvoffload.KeyResult {
	done := make(chan []kvoffload.KeyResult, 1)
	go func() {
		res, err := c.BatchOffload(context.Background(), id, objs)
		if err != nil {
			t.Errorf("offload in the background: %v", err)
		}
		done <- res
	}()
	return done
}

// startHeld starts offloading objs under id and returns once the call is running (it
// proposes its COMMIT and waits there); close m.release to let it finish.
func startHeld(t *testing.T, c *Coordinator, m *holdMeta, id fsm.TxnID, objs []kvoffload.Object) <-chan []kvoffload.KeyResult {
	t.Helper()
	done := goOffload(t, c, id, objs)
	select {
	case <-m.proposing:
	case <-time.After(5 * time.Second):
		t.Fatal("the held call never proposed its COMMIT")
	}
	return done
}

func newHoldMeta() *holdMeta {
	return &holdMeta{Meta: txntest.NewMeta(), proposing: make(chan struct{}), release: make(chan struct{})}
}

// A running txn ID reused for other bytes of the same length is refused, not joined.
func TestRunningTxnIDOtherBytes(t *testing.T) {
	m := newHoldMeta()
	c, _ := newCoordinatorFor(t, m, m.FSM)
	id := kvoffload.NewTxnID()
	a, b := value('A', 4096), value('B', 4096)
	done := startHeld(t, c, m, id, []kvoffload.Object{{Key: "k", Value: a}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.BatchOffload(ctx, id, []kvoffload.Object{{Key: "k", Value: b}})
	close(m.release)
	if !errors.Is(err, ErrTxnIDInUse) {
		t.Fatalf("running txn ID with other bytes: %v %+v, want ErrTxnIDInUse", err, res)
	}
	if res := <-done; res[0].Outcome != kvoffload.Stored {
		t.Fatalf("the running call: %+v", res)
	}
	wantValue(t, c, "k", a)
}

// A true retry joining the running call gets its results.
func TestRunningTxnIDRetryJoins(t *testing.T) {
	m := newHoldMeta()
	c, _ := newCoordinatorFor(t, m, m.FSM)
	id := kvoffload.NewTxnID()
	objs := []kvoffload.Object{{Key: "k", Value: value('A', 4096)}}
	done := startHeld(t, c, m, id, objs)
	joined := goOffload(t, c, id, objs)
	time.Sleep(50 * time.Millisecond) // let the retry find the call running
	close(m.release)
	first, retry := <-done, <-joined
	if !reflect.DeepEqual(first, retry) || first[0].Outcome != kvoffload.Stored {
		t.Fatalf("running call %+v, retry %+v", first, retry)
	}
}

// A true retry of a finished call gets the original results, key by key, for a batch with
// every kind of key: stored, already stored, in conflict, invalid, repeated with the same and
// with other bytes. Nothing is stored twice.
func TestFinishedTxnIDRetryGetsOriginalResults(t *testing.T) {
	m := txntest.NewMeta()
	c, _ := newTestCoordinator(t, m)
	offloadOK(t, c, kvoffload.NewTxnID(), []kvoffload.Object{obj("old", 1), obj("other", 1)})
	id := kvoffload.NewTxnID()
	objs := []kvoffload.Object{
		obj("new", 1),
		obj("old", 1),   // AlreadyStored
		obj("other", 2), // Conflict
		{Key: "empty"},  // Rejected
		obj("new", 1),   // repeated: AlreadyStored
		obj("new", 2),   // repeated with other bytes: Conflict
		{Key: "later", Value: nil},
		obj("later", 3), // the first valid copy of "later" is this one
	}
	first := offloadOK(t, c, id, objs)
	want := []kvoffload.Outcome{kvoffload.Stored, kvoffload.AlreadyStored, kvoffload.Conflict, kvoffload.Rejected, kvoffload.AlreadyStored, kvoffload.Conflict, kvoffload.Rejected, kvoffload.Stored}
	for i, r := range first {
		if r.Outcome != want[i] {
			t.Fatalf("first call, object %d (%q): %s %q, want %s", i, r.Key, r.Outcome, r.Reason, want[i])
		}
	}
	for range 2 {
		if retry := offloadOK(t, c, id, objs); !reflect.DeepEqual(retry, first) {
			t.Fatalf("retry:\n got %+v\nwant %+v", retry, first)
		}
	}
	if e, _ := m.FSM.Lookup("new"); e.TxnID != id {
		t.Fatalf("new committed by %s, want %s", e.TxnID, id)
	}
	if st := m.FSM.Stats(); st.Keys != 4 {
		t.Fatalf("%d live keys, want 4", st.Keys)
	}
}

// The recorded outcome of a key decides which bytes a retry may send: the same as the entry
// when Stored or AlreadyStored, other than it when Conflict, any when Stale.
func TestMayMatch(t *testing.T) {
	e := fsm.Entry{Size: 4, Sum: 7}
	for _, tc := range []struct {
		o         fsm.Outcome
		sum       uint64
		size      uint32
		mayMatch  bool
		situation string
	}{
		{fsm.OutcomeStored, 7, 4, true, "stored, same bytes"},
		{fsm.OutcomeStored, 8, 4, false, "stored, other sum"},
		{fsm.OutcomeStored, 7, 5, false, "stored, other size"},
		{fsm.OutcomeAlreadyStored, 7, 4, true, "already stored, same bytes"},
		{fsm.OutcomeAlreadyStored, 8, 4, false, "already stored, other bytes"},
		{fsm.OutcomeConflict, 7, 4, false, "conflict, the live bytes"},
		{fsm.OutcomeConflict, 8, 4, true, "conflict, other bytes"},
		{fsm.OutcomeStale, 8, 9, true, "stale"},
	} {
		if got := mayMatch(fsm.KeyOutcome{Key: "k", Outcome: tc.o, Entry: e}, tc.sum, tc.size); got != tc.mayMatch {
			t.Errorf("%s: mayMatch = %v", tc.situation, got)
		}
	}
}

// raceMeta applies a COMMIT of another batch under the same txn ID (as a call on another node
// would) just before the first proposal.
type raceMeta struct {
	*txntest.Meta
	foreign []byte
}

func (m *raceMeta) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	if m.foreign != nil {
		m.Apply(m.foreign)
		m.foreign = nil
	}
	return m.Meta.Propose(ctx, cmd)
}

// A COMMIT de-duplicated against another batch's COMMIT under the same txn ID is refused:
// this call's records are freed and none of its keys is reported stored.
func TestCommitDeduplicatedAgainstOtherBatch(t *testing.T) {
	id := kvoffload.NewTxnID()
	b := value('B', 4096)
	m := &raceMeta{Meta: txntest.NewMeta(), foreign: fsm.EncodeCommit(fsm.Commit{TxnID: id, Node: "n2",
		Entries: []fsm.Entry{{Key: "k", Size: uint32(len(b)), Sum: xxhash.Sum64(b), Gen: 1}}})}
	c, data := newCoordinatorFor(t, m, m.FSM)
	res, err := c.BatchOffload(context.Background(), id, []kvoffload.Object{{Key: "k", Value: value('A', 4096)}})
	if !errors.Is(err, ErrTxnIDInUse) {
		t.Fatalf("offload whose COMMIT lost to another batch's: %v %+v, want ErrTxnIDInUse", err, res)
	}
	if e, _ := m.FSM.Lookup("k"); e.Owner != "n2" {
		t.Fatalf("k owned by %q, want n2", e.Owner)
	}
	waitLive(t, data, 0)
}
