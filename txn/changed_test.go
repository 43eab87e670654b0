package txn

import (
	"context"
	"runtime"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/txn/txntest"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// scribbler is a bucket store whose WriteRecords first changes the payload of one key, as a
// caller that modifies a value during its BatchOffload would between admission and the write.
// With entered and resume set, it signals entered and waits for resume first.
type scribbler struct {
	*bucketstore.Store
	key             string
	entered, resume chan struct{}
}

func (s scribbler) WriteRecords(recs []bucketstore.RecordWrite) []error {
	for _, r := range recs {
		if r.Header.Key == s.key {
			if s.entered != nil {
				s.entered <- struct{}{}
				<-s.resume
			}
			r.Payload[0] ^= 0xff
		}
	}
	return s.Store.WriteRecords(recs)
}

// newScribbled is a recovered coordinator over s (its Store opened here on memfs).
func newScribbled(t *testing.T, s scribbler) (*Coordinator, *bucketstore.Store) {
	t.Helper()
	m := txntest.NewMeta()
	cfg := bucketstore.DefaultConfig("/b")
	cfg.FS = memfs.New()
	return openCoordinatorOver(t, m, m.FSM, cfg, func(data *bucketstore.Store) Buckets {
		s.Store = data
		return s
	})
}

// TestValueChangedDuringTheWrite: a value that changes after it was hashed is refused for its
// own key (Rejected, CodeInvalidValue), its batch's other keys are stored, and nothing of it
// stays: it reads NotFound and its bytes are not live.
func TestValueChangedDuringTheWrite(t *testing.T) {
	c, data := newScribbled(t, scribbler{key: "changed"})
	ctx := context.Background()
	res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("changed", 1), obj("stable", 2)})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Outcome != kvoffload.Rejected || r.Code != kvoffload.CodeInvalidValue {
		t.Errorf("changed value: %v %v (%s), want Rejected, invalid value", r.Outcome, r.Code, r.Reason)
	}
	if r := res[1]; r.Outcome != kvoffload.Stored {
		t.Errorf("its sibling: %v %v (%s), want Stored", r.Outcome, r.Code, r.Reason)
	}
	got, err := c.BatchGet(ctx, []string{"changed", "stable"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Status != kvoffload.NotFound || got[1].Status != kvoffload.Found {
		t.Errorf("reads: %v, %v; want NotFound, Found", got[0].Status, got[1].Status)
	}
	if err := c.reclaim.flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := data.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if want := bucketstore.RecordSize(len("stable"), 4); st.LiveBytes != want {
		t.Errorf("live bytes %d, want %d (the stored key's record only)", st.LiveBytes, want)
	}
}

// TestValueChangedAlone: a batch whose only value changed aborts (no record was written), and
// the key is still answered Rejected, CodeInvalidValue, not Failed as an I/O error.
func TestValueChangedAlone(t *testing.T) {
	c, _ := newScribbled(t, scribbler{key: "changed"})
	res, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{obj("changed", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Outcome != kvoffload.Rejected || r.Code != kvoffload.CodeInvalidValue {
		t.Errorf("changed value alone: %v %v (%s), want Rejected, invalid value", r.Outcome, r.Code, r.Reason)
	}
}

// TestJoinerOfAChangedValue: a caller that joined the in-flight write of a value whose own
// caller changed it is told to resend (Failed, CodeAborted), not that its value can never be
// stored.
func TestJoinerOfAChangedValue(t *testing.T) {
	s := scribbler{key: "changed", entered: make(chan struct{}), resume: make(chan struct{})}
	c, _ := newScribbled(t, s)
	ctx := context.Background()
	owner := make(chan []kvoffload.KeyResult, 1)
	go func() {
		res, _ := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("changed", 1), obj("stable", 2)})
		owner <- res
	}()
	<-s.entered // the owner is writing: its flight of "changed" is in the table
	joiner, id := make(chan []kvoffload.KeyResult, 1), kvoffload.NewTxnID()
	go func() {
		res, _ := c.BatchOffload(ctx, id, []kvoffload.Object{obj("changed", 1)})
		joiner <- res
	}()
	for planned := false; !planned; runtime.Gosched() {
		// The joiner's call is in the running table from the critical section that plans it.
		c.inflight.mu.Lock()
		_, planned = c.inflight.running[id]
		c.inflight.mu.Unlock()
	}
	close(s.resume)
	if r := (<-owner)[0]; r.Code != kvoffload.CodeInvalidValue {
		t.Fatalf("owner: %v %v (%s), want invalid value", r.Outcome, r.Code, r.Reason)
	}
	r := (<-joiner)[0]
	if !r.Joined || r.Outcome != kvoffload.Failed || r.Code != kvoffload.CodeAborted {
		t.Fatalf("joiner: %v %v joined=%v (%s), want Failed, aborted (resend), joined", r.Outcome, r.Code, r.Joined, r.Reason)
	}
}
