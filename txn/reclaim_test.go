package txn

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
)

// TestApplyNotBlockedByStalledFree: the FSM's apply does no bucket I/O. A REMOVE of a local
// key is applied while the disk stalls the free of its bytes (the hole punch blocks): the
// apply returns, the metadata no longer has the key, and other applies go on; once the disk
// is released the bytes are freed. Before the reclaimer, OnApplied freed on the apply
// goroutine, so one slow punch stalled apply, WaitApplied and every read index behind it.
func TestApplyNotBlockedByStalledFree(t *testing.T) {
	var stall atomic.Bool
	gate := make(chan struct{})       // closed: the stalled punch goes on
	stalled := make(chan struct{}, 1) // a punch or file removal is waiting on gate
	release := func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}
	defer release()
	inj := func(op bucketstore.Op, _ string) error {
		if stall.Load() && (op == bucketstore.OpPunch || op == bucketstore.OpRemove) {
			select {
			case stalled <- struct{}{}:
			default:
			}
			<-gate
		}
		return nil
	}
	cfg := bucketstore.DefaultConfig("/b")
	cfg.FS = bucketstore.NewErrorFS(bucketstore.NewMemFS(), inj)
	data, err := bucketstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &flakyMeta{f: fsm.New()}
	c, err := New(DefaultConfig("n1"), &memLog{}, data, m)
	if err != nil {
		t.Fatal(err)
	}
	m.f.Watch(c.OnApplied)
	m.f.WatchRestore(c.OnRestored)
	ctx := context.Background()
	if _, err := c.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { release(); c.Close(); data.Close() })
	if res, err := c.BatchOffload(ctx, NewTxnID(), []Object{obj("k", 1)}); err != nil || res[0].Outcome != Stored {
		t.Fatalf("offload: %v %+v", err, res)
	}
	e, _ := m.f.Lookup("k")

	stall.Store(true)
	applied := make(chan struct{})
	go func() {
		m.f.ApplyCommand(m.index.Add(1), fsm.EncodeRemove(fsm.Remove{TxnID: NewTxnID(), Keys: []fsm.KeyGen{{Key: "k", Gen: e.Gen}}}))
		m.f.ApplyCommand(m.index.Add(1), fsm.EncodeAbort(fsm.Abort{TxnID: NewTxnID(), Node: "n1", Reason: "a later command"}))
		close(applied)
	}()
	select {
	case <-stalled:
	case <-time.After(5 * time.Second):
		t.Fatal("the removed key's bytes were never freed")
	}
	select {
	case <-applied:
	case <-time.After(5 * time.Second):
		t.Fatal("apply blocked while the free of a removed key's bytes stalls on the disk")
	}
	if _, ok := m.f.Lookup("k"); ok {
		t.Fatal("the key is still in the metadata after its REMOVE was applied")
	}

	release()
	waitLive(t, data, 0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := data.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.AllocatedBytes == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the disk was released: %d bytes still allocated, want 0", st.AllocatedBytes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
