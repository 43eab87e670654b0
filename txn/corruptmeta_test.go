package txn

import (
	"context"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// ghostMeta is txntest.Meta whose metadata also holds extra entries that apply would refuse
// today: the state a snapshot written before those checks can restore.
type ghostMeta struct {
	*txntest.Meta
	extra map[string]fsm.Entry
}

func (m *ghostMeta) Lookup(k string) (fsm.Entry, bool) {
	if e, ok := m.extra[k]; ok {
		return e, true
	}
	return m.Meta.Lookup(k)
}

func (m *ghostMeta) LiveOf(owner string) []fsm.Entry {
	var live []fsm.Entry
	for _, e := range m.extra {
		if e.Owner == owner {
			live = append(live, e)
		}
	}
	return append(live, m.Meta.LiveOf(owner)...)
}

// Start-up over metadata holding an entry that names another key's record and one with a
// misaligned extent: the node starts (Collect would refuse both), the bad entries are removed
// through Raft without freeing anything, and the real key reads back with its bytes counted.
func TestRecoverWithCorruptMetadata(t *testing.T) {
	mem := memfs.New()
	open := func() *bucketstore.Store {
		cfg := bucketstore.DefaultConfig("/b")
		cfg.FS = mem
		s, err := bucketstore.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	m := &ghostMeta{Meta: txntest.NewMeta(), extra: map[string]fsm.Entry{}}
	tc := DefaultConfig("n1")
	tc.CommitTimeout = 300 * time.Millisecond
	data := open()
	c, err := New(tc, &memLog{}, data, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{obj("real", 1)}); err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("offload: %v %+v", err, res)
	}
	c.Close()
	data.Close()

	real, _ := m.FSM.Lookup("real")
	fake := real
	fake.Key, fake.Gen, fake.TxnID = "fake", 1, kvoffload.NewTxnID() // the same bytes, another key
	skew := real
	skew.Key, skew.Gen = "skew", 1
	skew.Extent.Offset += 100
	m.extra["fake"], m.extra["skew"] = fake, skew

	data = open()
	defer data.Close()
	c, err = New(tc, &memLog{}, data, m)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rep, err := c.Recover(context.Background())
	if err != nil {
		t.Fatalf("start-up over corrupt metadata: %v", err)
	}
	if rep.CorruptKeys != 2 {
		t.Errorf("recovery removed %d corrupt entries, want 2", rep.CorruptKeys)
	}
	delete(m.extra, "fake") // the REMOVEs applied (the ghost entries are not in the FSM)
	delete(m.extra, "skew")
	got, err := c.BatchGet(context.Background(), []string{"real"})
	if err != nil || got[0].Status != kvoffload.Found || string(got[0].Value) != string(obj("real", 1).Value) {
		t.Fatalf("the real key after start-up: %v %+v", err, got)
	}
	if st, _ := data.Stats(); st.LiveBytes != real.Extent.Length {
		t.Fatalf("live bytes %d, want the real key's %d", st.LiveBytes, real.Extent.Length)
	}
}

// A read of an entry that names no record answers Corrupt and removes it; the bytes it named
// (another key's) are not freed, and that key still reads back.
func TestReadOfCorruptMetadataKeepsOthersBytes(t *testing.T) {
	m := txntest.NewMeta()
	c, data := newTestCoordinator(t, m)
	if res, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{obj("real", 1)}); err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("offload: %v %+v", err, res)
	}
	real, _ := m.FSM.Lookup("real")
	bad := fsm.Entry{Key: "bad", Gen: 1, Size: 1 << 20, Sum: 1, Extent: real.Extent} // Size does not match the Length
	if r := m.FSM.ApplyCommand(100, fsm.EncodeCommit(fsm.Commit{TxnID: kvoffload.NewTxnID(), Node: "n1", Entries: []fsm.Entry{bad}})); r.Keys[0].Outcome != fsm.OutcomeInvalid {
		t.Fatalf("apply of an entry on another key's bytes: %s", r.Keys[0].Outcome)
	}
	bad.Extent.Offset += 1 << 30 // elsewhere, so apply takes it; reads must refuse it
	m.FSM.ApplyCommand(101, fsm.EncodeCommit(fsm.Commit{TxnID: kvoffload.NewTxnID(), Node: "n1", Entries: []fsm.Entry{bad}}))
	got, err := c.BatchGet(context.Background(), []string{"bad", "real"})
	if err != nil || got[0].Status != kvoffload.Corrupt || got[1].Status != kvoffload.Found {
		t.Fatalf("read of corrupt metadata beside a real key: %v %+v", err, got)
	}
	if _, ok := m.FSM.Lookup("bad"); ok {
		t.Fatal("corrupt metadata not removed")
	}
	if st, _ := data.Stats(); st.LiveBytes != real.Extent.Length {
		t.Fatalf("live bytes %d, want the real key's %d", st.LiveBytes, real.Extent.Length)
	}
}
