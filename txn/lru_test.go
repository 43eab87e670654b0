package txn

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
)

// A lease taken before the key is tracked (BatchExists saw the metadata before the FSM's
// apply hook added the key here) still protects it once added; re-adding keeps a lease.
func TestLeaseBeforeAdd(t *testing.T) {
	l := newLRU()
	l.lease("early", time.Now().Add(time.Hour))
	l.add("early", 1, 100)
	l.add("plain", 1, 100)
	if got := l.oldest(1 << 20); len(got) != 1 || got[0].key != "plain" {
		t.Fatalf("eviction candidates %+v, want only the unleased key", got)
	}
	l.add("early", 2, 100) // stored again
	if got := l.oldest(1 << 20); len(got) != 1 || got[0].key != "plain" {
		t.Fatalf("after re-adding: candidates %+v, want the lease kept", got)
	}
	l.lease("gone", time.Now().Add(-time.Second)) // expired, never added
	for i := range maxPendingLeases + 1 {
		l.lease(string(rune('a'+i%26))+"-"+string(rune(i)), time.Now().Add(-time.Second))
	}
	if n := len(l.pending); n > maxPendingLeases {
		t.Fatalf("%d pending leases, want at most %d", n, maxPendingLeases)
	}
}

// gateMeta holds REMOVE proposals (evictions) until released.
type gateMeta struct {
	*txntest.Meta
	entered, release chan struct{}
}

func (m *gateMeta) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	if t, _, _ := fsm.Decode(cmd); t == fsm.CmdRemove {
		m.entered <- struct{}{}
		<-m.release
	}
	return m.Meta.Propose(ctx, cmd)
}

// A lease asked for while an eviction of that key is under way must not be granted with a
// Present answer: the key is answered Absent, and every key answered Present with a lease
// is still readable after the eviction (cases.md C11).
func TestLeaseDuringEviction(t *testing.T) {
	m := &gateMeta{Meta: txntest.NewMeta(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	c, _ := newCoordinatorCap(t, m, m.FSM, 1<<20)
	ctx := context.Background()
	val := bytes.Repeat([]byte{7}, 60<<10)
	var keys []string
	for i := range 64 {
		k := fmt.Sprintf("k%03d", i)
		done := make(chan []kvoffload.KeyResult, 1)
		go func() {
			r, _ := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: k, Value: val}})
			done <- r
		}()
		select {
		case r := <-done:
			if !r[0].Outcome.OK() {
				t.Fatalf("%s: %+v", k, r)
			}
			keys = append(keys, k)
			continue
		case <-m.entered: // an eviction of the oldest keys is proposed and held
		}
		ex := c.BatchExistsLease(ctx, keys, time.Hour)
		if ex.Keys[0] != kvoffload.Absent {
			t.Fatalf("%s, chosen by the eviction under way, answered %v with a lease", keys[0], ex.Keys[0])
		}
		close(m.release)
		if r := <-done; !r[0].Outcome.OK() {
			t.Fatalf("the offload that evicted: %+v", r)
		}
		got, err := c.BatchGet(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		leased := 0
		for j, p := range ex.Keys {
			if p == kvoffload.Present {
				leased++
				if got[j].Status != kvoffload.Found {
					t.Fatalf("%s was kvoffload.Present with a 1 h lease, then read %s", keys[j], got[j].Status)
				}
			}
		}
		if leased == 0 {
			t.Fatal("no key was leased: the test proves nothing")
		}
		return
	}
	t.Fatal("the store never evicted")
}

// lateMeta loses the answer to the first REMOVE (it applies later, when the test says) and
// holds Barrier until released, as a leader change can.
type lateMeta struct {
	*txntest.Meta
	mu      sync.Mutex
	late    []byte
	lost    chan struct{}
	barrier chan struct{}
}

func (m *lateMeta) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	if t, _, _ := fsm.Decode(cmd); t == fsm.CmdRemove {
		m.mu.Lock()
		first := m.late == nil
		if first {
			m.late = cmd
		}
		m.mu.Unlock()
		if first {
			close(m.lost)
			return nil, txntest.ErrLost
		}
	}
	return m.Meta.Propose(ctx, cmd)
}

func (m *lateMeta) Barrier(ctx context.Context) error {
	select {
	case <-m.barrier:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// An eviction whose REMOVE answer was lost keeps its victims unleasable until the outcome is
// known: the REMOVE may still apply, and a lease granted meanwhile would be broken by it.
func TestLeaseAfterIndeterminateEviction(t *testing.T) {
	m := &lateMeta{Meta: txntest.NewMeta(), lost: make(chan struct{}), barrier: make(chan struct{})}
	close(m.barrier) // recovery needs one
	c, _ := newCoordinatorCap(t, m, m.FSM, 1<<20)
	m.barrier = make(chan struct{})
	ctx := context.Background()
	val := bytes.Repeat([]byte{7}, 60<<10)
	var keys []string
	for i := 0; ; i++ {
		k := fmt.Sprintf("k%03d", i)
		_, _ = c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: k, Value: val}})
		keys = append(keys, k)
		select {
		case <-m.lost:
		default:
			if i > 64 {
				t.Fatal("the store never evicted")
			}
			continue
		}
		break
	}
	if ex := c.BatchExistsLease(ctx, keys[:1], time.Hour); ex.Keys[0] != kvoffload.Absent {
		t.Fatalf("%s, chosen by an eviction whose outcome is unknown, answered %v with a lease", keys[0], ex.Keys[0])
	}
	m.FSM.ApplyCommand(1<<40, m.late) // the lost REMOVE applies after all
	if g, _ := c.BatchGet(ctx, keys[:1]); g[0].Status != kvoffload.NotFound {
		t.Fatalf("%s after the late REMOVE: %s", keys[0], g[0].Status)
	}
}

// A read is a use: after a BatchGet of the two oldest keys (and one absent), the keys not
// read are evicted first.
func TestReadsRefreshTheLRU(t *testing.T) {
	c, _ := newTestCoordinator(t, txntest.NewMeta())
	ctx := context.Background()
	keys := []string{"k0", "k1", "k2", "k3"}
	for _, k := range keys { // one transaction each, so k0 is the oldest
		if r, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: k, Value: []byte(k)}}); err != nil || !r[0].Outcome.OK() {
			t.Fatalf("offload %s: %+v %v", k, r, err)
		}
	}
	if got, err := c.BatchGet(ctx, []string{"k1", "absent", "k0"}); err != nil || got[0].Status != kvoffload.Found || got[2].Status != kvoffload.Found {
		t.Fatalf("BatchGet: %+v %v", got, err)
	}
	var order []string
	for _, e := range c.ev.lru.oldest(1 << 40) {
		order = append(order, e.key)
	}
	// The batch's keys are touched together, in the order they are read (extent order).
	if len(order) != 4 || order[0] != "k2" || order[1] != "k3" {
		t.Errorf("eviction order %v after reading k1 and k0, want k2, k3, then the two read", order)
	}
}

// A key a running batch has read is a use at once: an eviction while the batch still runs
// (an offload at the quota while the batch's last value is being delivered) takes the keys
// nobody read, not the batch's.
func TestReadKeysNotEvictedDuringTheirBatch(t *testing.T) {
	f := fsm.New()
	c, _ := newCoordinatorCap(t, &txntest.Meta{FSM: f}, f, 4*bucketstore.RecordSize(2, 1000))
	ctx := context.Background()
	for _, k := range []string{"k0", "k1", "k2", "k3"} { // k0 oldest
		if r, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: k, Value: make([]byte, 1000)}}); err != nil || !r[0].Outcome.OK() {
			t.Fatalf("offload %s: %+v %v", k, r, err)
		}
	}
	var visits atomic.Int32 // visits may run on several goroutines
	release := make(chan struct{})
	err := c.BatchGetEach(ctx, []string{"k0", "k1"}, nil, func(i int, r kvoffload.GetResult) bool {
		if r.Status != kvoffload.Found {
			t.Errorf("position %d: %s", i, r.Status)
		}
		if visits.Add(1) == 2 { // both read; evict while the batch has not returned
			go func() {
				defer close(release)
				if r, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "k4", Value: make([]byte, 1000)}}); err != nil || !r[0].Outcome.OK() {
					t.Errorf("offload at the quota during the batch: %+v %v", r, err)
				}
			}()
			<-release
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]bool{"k0": true, "k1": true, "k2": false, "k4": true} {
		if _, ok := f.Lookup(k); ok != want {
			t.Errorf("%s present %v, want %v (the unread k2 is the oldest, so evicted first)", k, ok, want)
		}
	}
}

// load tracks entries as adds in order would, into an empty LRU (no lookups) and into one a
// hook already added to (the same key twice must stay one node, and a newer generation
// tracked already is kept), keeping a lease taken before either; then it applies what was
// queued since beginLoad, in order.
func TestLoadIsAddInOrder(t *testing.T) {
	ents := func(keys ...string) []fsm.Entry {
		var out []fsm.Entry
		for i, k := range keys {
			out = append(out, fsm.Entry{Key: k, Gen: uint64(i + 1), Extent: fsm.Extent{Length: 4096}})
		}
		return out
	}
	order := func(l *lru) string {
		var got []string
		for i := l.node(0).next; i != 0; i = l.node(i).next {
			n := l.node(i)
			got = append(got, fmt.Sprintf("%s@%d", n.key, n.gen))
		}
		return fmt.Sprint(got, " ", l.byKey.Len())
	}
	for _, c := range []struct {
		name    string
		before  func(l *lru)
		want    string
		victims string
	}{
		{"empty", func(*lru) {}, "[a@1 b@2 c@3 d@4] 4", "[a c d]"},
		// a hook ran first: c is tracked at a later generation than the copy's
		{"c tracked at a newer generation", func(l *lru) { l.add("c", 9, 4096) }, "[c@9 a@1 b@2 d@4] 4", "[c a d]"},
		{"c tracked at an older generation", func(l *lru) { l.add("c", 2, 4096) }, "[a@1 b@2 c@3 d@4] 4", "[a c d]"},
		// queued while loading: a REMOVE of a, a COMMIT of e, a REMOVE of c at a generation
		// the copy does not hold (a no-op), and a's removal again
		{"queued", func(l *lru) {
			l.beginLoad()
			l.drop("a", 1)
			l.add("e", 7, 4096)
			l.drop("c", 8)
			l.drop("a", 1)
		}, "[b@2 c@3 d@4 e@7] 4", "[c d e]"},
	} {
		l := newLRU()
		l.lease("b", time.Now().Add(time.Hour))
		c.before(l)
		l.load(ents("a", "b", "c", "d"))
		if got := order(l); got != c.want {
			t.Fatalf("%s: order %s, want %s", c.name, got, c.want)
		}
		var victims []string
		for _, v := range l.oldest(3 * 4096) {
			victims = append(victims, v.key)
		}
		if fmt.Sprint(victims) != c.victims {
			t.Fatalf("%s: victims %v, want %s (b is leased)", c.name, victims, c.victims)
		}
		if l.add("f", 1, 4096); l.loading || len(l.journal) != 0 || !strings.Contains(order(l), "f@1") {
			t.Fatalf("%s: after load, add does not apply: %s", c.name, order(l))
		}
	}
}
