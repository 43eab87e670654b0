package txn

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// recordingMeta is txntest.Meta that keeps every command it applied: the Raft log.
type recordingMeta struct {
	*txntest.Meta
	mu   sync.Mutex
	cmds [][]byte
}

func (m *recordingMeta) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	res, err := m.Meta.Propose(ctx, cmd)
	if err == nil {
		m.mu.Lock()
		m.cmds = append(m.cmds, cmd)
		m.mu.Unlock()
	}
	return res, err
}

// TestLRUAfterLogReplay: a restart replays the Raft log into a fresh FSM before recovery
// (the FSM's hooks see every command, but leave the LRU to start-up collection), and after
// recovery the LRU holds exactly this node's live keys at their live generations, and follows
// the metadata again.
func TestLRUAfterLogReplay(t *testing.T) {
	ctx := context.Background()
	cfg := bucketstore.DefaultConfig("/b")
	cfg.FS = memfs.New()
	m := &recordingMeta{Meta: txntest.NewMeta()}
	c, data := openCoordinator(t, m, m.FSM, cfg)
	for i := range 6 {
		if res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj(fmt.Sprintf("k%d", i), byte(i))}); err != nil || res[0].Outcome != kvoffload.Stored {
			t.Fatalf("offload k%d: %v %+v", i, err, res)
		}
	}
	if _, err := c.Remove(ctx, []string{"k1", "k2"}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("k2", 9)}); err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("k2 again, a later generation: %v %+v", err, res)
	}
	c.Close()
	data.Close()

	// The restart: a fresh FSM, the hooks installed, the log replayed, then recovery.
	f := fsm.New()
	data, err := bucketstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	c, err = New(DefaultConfig("n1"), &memLog{}, data, &txntest.Meta{FSM: f})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f.Watch(c.OnApplied)
	f.WatchRestore(c.OnRestored)
	for i, cmd := range m.cmds {
		f.ApplyCommand(uint64(i+1), cmd)
	}
	if n := c.ev.lru.n; n != 1 {
		t.Fatalf("the LRU holds %d keys before recovery; collection loads it", n-1)
	}
	if _, err := c.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	checkLRU := func(want ...string) {
		t.Helper()
		var got []string
		for i := c.ev.lru.node(0).next; i != 0; i = c.ev.lru.node(i).next {
			got = append(got, c.ev.lru.node(i).key)
		}
		if len(got) != len(want) {
			t.Fatalf("LRU holds %q; want the live keys %q", got, want)
		}
		for _, k := range want {
			i, ok := c.ev.lru.find(k)
			e, live := f.Lookup(k)
			if !ok || !live || c.ev.lru.node(i).gen != e.Gen {
				t.Fatalf("LRU entry of %s: tracked %v live %v (LRU holds %q)", k, ok, live, got)
			}
		}
	}
	checkLRU("k0", "k2", "k3", "k4", "k5")
	if res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("k9", 1)}); err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("offload after recovery: %v %+v", err, res)
	}
	if _, err := c.Remove(ctx, []string{"k3"}); err != nil {
		t.Fatal(err)
	}
	checkLRU("k0", "k2", "k4", "k5", "k9")
}

// lruKeys lists the keys c's LRU tracks, oldest first, each with its generation.
func lruKeys(c *Coordinator) map[string]uint64 {
	c.ev.lru.mu.Lock()
	defer c.ev.lru.mu.Unlock()
	got := map[string]uint64{}
	for i := c.ev.lru.node(0).next; i != 0; i = c.ev.lru.node(i).next {
		got[c.ev.lru.node(i).key] = c.ev.lru.node(i).gen
	}
	return got
}

// TestLRUFollowsChangesDuringCollection: a REMOVE and a snapshot restore applied between
// start-up collection's metadata copy (Meta.LiveOf) and the LRU's load leave the LRU
// holding exactly the live keys. Otherwise the hooks' drops find the LRU still empty, the
// load then inserts the removed keys from the stale copy, eviction chooses keys that are
// gone, and offloads are Rejected "quota" with evictable keys stored.
func TestLRUFollowsChangesDuringCollection(t *testing.T) {
	ctx := context.Background()
	cfg := bucketstore.DefaultConfig("/b")
	cfg.FS, cfg.Capacity = memfs.New(), 8*4096
	m := txntest.NewMeta()
	c, data := openCoordinator(t, m, m.FSM, cfg)
	gens := map[string]uint64{}
	for i := range 6 {
		k := fmt.Sprintf("k%d", i)
		if res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj(k, byte(i))}); err != nil || res[0].Outcome != kvoffload.Stored {
			t.Fatalf("offload %s: %v %+v", k, err, res)
		}
		e, _ := m.FSM.Lookup(k)
		gens[k] = e.Gen
	}
	c.Close()
	data.Close()

	// The snapshot a leader sends: the same state less k2.
	lead := fsm.New()
	var buf bytes.Buffer
	if _, err := m.FSM.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if err := lead.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	lead.ApplyCommand(m.NextIndex(), fsm.EncodeRemove(fsm.Remove{TxnID: kvoffload.NewTxnID(), Keys: []fsm.KeyGen{{Key: "k2", Gen: gens["k2"]}}}))
	buf.Reset()
	if _, err := lead.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	meta := &removeAfterCopy{Meta: m, then: func() {
		if err := m.FSM.Restore(bytes.NewReader(buf.Bytes())); err != nil {
			t.Error(err)
		}
		m.Apply(fsm.EncodeRemove(fsm.Remove{TxnID: kvoffload.NewTxnID(), Keys: []fsm.KeyGen{{Key: "k1", Gen: gens["k1"]}}}))
	}}
	c, _ = openCoordinator(t, meta, m.FSM, cfg)
	want := map[string]uint64{}
	for k, g := range gens {
		if _, live := m.FSM.Lookup(k); live {
			want[k] = g
		}
	}
	if len(want) != 4 {
		t.Fatalf("live after the REMOVE and the restore: %v, want 4 keys", want)
	}
	if got := lruKeys(c); !maps.Equal(got, want) {
		t.Fatalf("LRU after collection: %v; want the live keys %v", got, want)
	}
	// Eviction makes room from live keys only: a quota's worth of new keys is Stored.
	for i := range 8 {
		k := fmt.Sprintf("n%d", i)
		if res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj(k, 1)}); err != nil || res[0].Outcome != kvoffload.Stored {
			t.Fatalf("offload %s after collection: %v %+v", k, err, res)
		}
	}
}
