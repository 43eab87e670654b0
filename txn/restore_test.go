package txn

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// TestSnapshotRestoreFreesRemovedKeys: a node that catches up by installing a snapshot in
// which its keys were removed frees their bytes and forgets them in the LRU, so its quota
// is not used up by keys no metadata references: a Restore that does not reach the
// coordinator leaves the bytes counted until a restart, and every later offload Rejected
// "quota".
func TestSnapshotRestoreFreesRemovedKeys(t *testing.T) {
	m := txntest.NewMeta()
	const capacity = 16 * 4096
	c, data := newCoordinatorCap(t, m, m.FSM, capacity)
	ctx := context.Background()
	var kg []fsm.KeyGen
	for i := range 8 {
		k := fmt.Sprintf("k%d", i)
		if _, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj(k, byte(i))}); err != nil {
			t.Fatal(err)
		}
		e, _ := m.FSM.Lookup(k)
		kg = append(kg, fsm.KeyGen{Key: k, Gen: e.Gen})
	}
	// The leader's state: the same, then a Remove of all eight keys, sent as a snapshot.
	var buf bytes.Buffer
	if _, err := m.FSM.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	lead := fsm.New()
	if err := lead.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	lead.ApplyCommand(m.NextIndex(), fsm.EncodeRemove(fsm.Remove{TxnID: kvoffload.NewTxnID(), Keys: kg, Reason: "remove"}))
	buf.Reset()
	if _, err := lead.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if err := m.FSM.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	waitLive(t, data, 0) // the reclaimer frees them after the Restore, off Raft's goroutine
	for i := range 20 {
		res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj(fmt.Sprintf("n%d", i), 1), obj(fmt.Sprintf("n%d.b", i), 2)})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Outcome != kvoffload.Stored {
				t.Fatalf("offload %d: %s %s %s", i, r.Key, r.Outcome, r.Reason)
			}
		}
	}
	if st, _ := data.Stats(); st.LiveBytes > capacity {
		t.Fatalf("live bytes %d over the quota %d", st.LiveBytes, capacity)
	}
}

// removeAfterCopy applies then to the metadata right after the first LiveOf: a removal that
// lands between start-up collection's metadata copy and the end of recovery.
type removeAfterCopy struct {
	*txntest.Meta
	once sync.Once
	then func()
}

func (m *removeAfterCopy) LiveOf(owner string) []fsm.Entry {
	live := m.Meta.LiveOf(owner)
	m.once.Do(m.then)
	return live
}

// TestRemoveDuringRecoveryIsFreed: a REMOVE applied while recovery runs, after collection
// adopted the key's extent, frees the bytes when recovery ends, as a snapshot restore in the
// same window does: OnApplied must not skip such frees until recovery has finished, or those
// bytes stay counted until the next restart.
func TestRemoveDuringRecoveryIsFreed(t *testing.T) {
	ctx := context.Background()
	m := txntest.NewMeta()
	cfg := bucketstore.DefaultConfig("/b")
	cfg.FS = memfs.New()
	open := func(meta Meta) (*Coordinator, *bucketstore.Store) {
		data, err := bucketstore.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(DefaultConfig("n1"), &memLog{}, data, meta)
		if err != nil {
			t.Fatal(err)
		}
		m.FSM.Watch(c.OnApplied)
		return c, data
	}
	c, data := open(m)
	if _, err := c.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 1)}); err != nil {
		t.Fatal(err)
	}
	e, _ := m.FSM.Lookup("k")
	c.Close()
	data.Close()

	meta := &removeAfterCopy{Meta: m, then: func() {
		m.Apply(fsm.EncodeRemove(fsm.Remove{TxnID: kvoffload.NewTxnID(), Keys: []fsm.KeyGen{{Key: "k", Gen: e.Gen}}}))
	}}
	c, data = open(meta)
	defer data.Close()
	defer c.Close()
	if _, err := c.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.FSM.Lookup("k"); ok {
		t.Fatal("the REMOVE was not applied during recovery")
	}
	if st, _ := data.Stats(); st.LiveBytes != 0 {
		t.Fatalf("after a REMOVE applied during recovery: %d live bytes, want 0", st.LiveBytes)
	}
}
