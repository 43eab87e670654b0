package txn

import (
	"context"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// scribbler is a bucket store whose WriteRecords first changes the payload of one key, as a
// caller that modifies a value during its BatchOffload would between admission and the write.
type scribbler struct {
	*bucketstore.Store
	key string
}

func (s scribbler) WriteRecords(recs []bucketstore.RecordWrite) []error {
	for _, r := range recs {
		if r.Header.Key == s.key {
			r.Payload[0] ^= 0xff
		}
	}
	return s.Store.WriteRecords(recs)
}

// TestValueChangedDuringTheWrite: a value that changes after it was hashed is refused for its
// own key (Rejected, CodeInvalidValue), its batch's other keys are stored, and nothing of it
// stays: it reads NotFound and its bytes are not live.
func TestValueChangedDuringTheWrite(t *testing.T) {
	m := &flakyMeta{f: fsm.New()}
	cfg := bucketstore.DefaultConfig("/b")
	cfg.FS = memfs.New()
	data, err := bucketstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(DefaultConfig("n1"), &memLog{}, scribbler{data, "changed"}, m)
	if err != nil {
		t.Fatal(err)
	}
	m.f.Watch(c.OnApplied)
	m.f.WatchRestore(c.OnRestored)
	if _, err := c.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); data.Close() })
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
