package txn

import (
	"math"
	"sync"
	"time"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/invariants"
)

// lru orders the keys whose bytes this node owns by last use (offload or read), oldest
// first: the eviction order when the bucket store's capacity is reached.
//
// It holds one key per committed key of this node, so its layout is sized for that (issue 9,
// memory per key): the order is a doubly linked list threaded through one slice of
// fixed-size nodes (in pages) by uint32 index, not a container/list of pointers, and byKey
// (an fsm.KeyIndex over the nodes) finds a key's node. A node shares the key string it was
// given (the FSM's), so no key is copied; the lease is unix nanoseconds. About 48 bytes per
// node and 8 to 16 of index, against ~170 for the list element, the entry and the map of
// pointers it replaces.
type lru struct {
	mu sync.Mutex
	// pages hold nodes 0 to n-1, lruPage each (growing copies no node and leaves no slack
	// but the last page's). Node 0 is the ring's sentinel: its next is the least recently
	// used node, its prev the most recently used. A freed node is chained from free through
	// next, for reuse; n never shrinks (it is the most keys this node has tracked at once).
	pages [][]lruNode
	n     uint32
	free  uint32       // first free node, 0 if none
	byKey fsm.KeyIndex // key -> node
	// pending holds leases taken on keys not tracked yet: BatchExists can see a key in the
	// metadata just before the FSM's apply hook adds it here; add picks the lease up.
	pending map[string]time.Time
	// From beginLoad to load, add and drop are queued in journal, not applied: start-up
	// collection loads the LRU from a copy of the metadata, and a change applied while it
	// works on that copy (a REMOVE, a snapshot restore) must land after the copy, not be
	// lost against the still empty LRU (see load).
	loading bool
	journal []lruOp
}

// lruOp is an add or a drop queued while the LRU loads.
type lruOp struct {
	key   string
	gen   uint64
	bytes int64
	drop  bool
}

// maxPendingLeases bounds pending: beyond it, expired pending leases are dropped.
const maxPendingLeases = 4096

// lruEntry is one tracked key as oldest hands it out: what an eviction removes and frees.
type lruEntry struct {
	key         string
	gen         uint64
	bytes       int64     // extent length: what freeing it gives back
	leasedUntil time.Time // not evicted before this (BatchExists with a lease)
	evicting    bool      // chosen by oldest; its REMOVE may be under way: no lease now
}

// lruNode is the stored form of an lruEntry, linked into the order by index.
type lruNode struct {
	key        string
	gen        uint64
	leaseUntil int64  // unix ns; 0: no lease
	bytes      uint32 // extent length, at most fsm.MaxRecordLength (1 GiB + 4 KiB) < 2^32
	prev, next uint32
	evicting   bool
}

// lruPage is the number of nodes of a page (48 KiB).
const lruPage = 1024

func newLRU() *lru {
	return &lru{pages: [][]lruNode{make([]lruNode, lruPage)}, n: 1, pending: map[string]time.Time{}}
}

// node returns node i (i < l.n).
func (l *lru) node(i uint32) *lruNode { return &l.pages[i/lruPage][i%lruPage] }

func (l *lru) keyAt(i uint32) string { return l.node(i).key }

// find returns the node of key.
func (l *lru) find(key string) (uint32, bool) { return l.byKey.Find(key, l.keyAt) }

// unixNano is t in unix nanoseconds, 0 for the zero time (no lease).
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// clampBytes stores an extent length in a node. Every length this node tracks passed the
// FSM's bounds (apply refuses Length over fsm.MaxRecordLength; recovery and Restore add only
// entries fsm.CheckEntry accepts), so the clamp never bites; it keeps a bad length from
// wrapping.
func clampBytes(n int64) uint32 { return uint32(min(max(n, 0), math.MaxUint32)) }

// unlink takes node i out of the order.
func (l *lru) unlink(i uint32) {
	n := l.node(i)
	if invariants.Enabled && (i == 0 || l.node(n.prev).next != i || l.node(n.next).prev != i) {
		invariants.Failf("txn: the LRU's order is a ring of its tracked keys", "node %d (%q) is not in it: prev %d, next %d", i, n.key, n.prev, n.next)
	}
	l.node(n.prev).next, l.node(n.next).prev = n.next, n.prev
}

// pushBack links node i as the most recently used.
func (l *lru) pushBack(i uint32) {
	last := l.node(0).prev
	l.node(i).prev, l.node(i).next = last, 0
	l.node(last).next, l.node(0).prev = i, i
}

// alloc returns the index of an unused node, reusing a freed one first.
func (l *lru) alloc() uint32 {
	if i := l.free; i != 0 {
		l.free = l.node(i).next
		return i
	}
	if l.n%lruPage == 0 {
		l.pages = append(l.pages, make([]lruNode, lruPage))
	}
	l.n++
	return l.n - 1
}

// add records key as most recently used, keeping any lease taken on it.
func (l *lru) add(key string, gen uint64, bytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loading {
		l.journal = append(l.journal, lruOp{key: key, gen: gen, bytes: bytes})
		return
	}
	l.addLocked(key, gen, bytes)
}

func (l *lru) addLocked(key string, gen uint64, bytes int64) {
	lease := unixNano(l.pending[key])
	delete(l.pending, key)
	i, ok := l.find(key)
	if ok {
		lease = max(lease, l.node(i).leaseUntil)
		l.unlink(i)
	} else {
		i = l.alloc()
	}
	*l.node(i) = lruNode{key: key, gen: gen, leaseUntil: lease, bytes: clampBytes(bytes)}
	if !ok {
		l.byKey.Insert(key, i)
	}
	l.pushBack(i)
	if invariants.Enabled {
		if j, found := l.find(key); !found || j != i || l.node(0).prev != i {
			invariants.Failf("txn: an added key is tracked once, as the most recently used", "key %q at node %d: index %d (%v), newest %d", key, i, j, found, l.node(0).prev)
		}
	}
}

// beginLoad queues add and drop from now until load (start-up collection calls it before
// it copies the metadata it loads from).
func (l *lru) beginLoad() {
	l.mu.Lock()
	l.loading = true
	l.mu.Unlock()
}

// load adds entries, whose keys are distinct, as add would one by one, in order (the last
// the most recently used), then applies the adds and drops queued since beginLoad, in the
// order they came, all under one hold of the lock. The queue brings a copy of the metadata
// up to date whatever point between beginLoad and load it was taken at: a key's last queued
// add sets it whatever the copy held, and a drop applies to the generation it names.
//
// Into an empty LRU (start-up collection's case) no key can be tracked already, so none is
// looked up first: half the hashing and probing of 1M adds (~0.15 s of a start-up's CPU).
// Into a non-empty one, an entry is added key by key, but never over a tracked generation
// newer than its own.
func (l *lru) load(entries []fsm.Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byKey.Len() == 0 {
		nodes := make([]uint32, len(entries))
		for i := range entries {
			e := &entries[i]
			var lease int64
			if len(l.pending) != 0 {
				lease = unixNano(l.pending[e.Key])
				delete(l.pending, e.Key)
			}
			n := l.alloc()
			*l.node(n) = lruNode{key: e.Key, gen: e.Gen, leaseUntil: lease, bytes: clampBytes(e.Extent.Length)}
			l.pushBack(n)
			nodes[i] = n
		}
		l.byKey.InsertAll(len(entries), func(i int) string { return entries[i].Key }, func(i int) uint32 { return nodes[i] })
	} else {
		for _, e := range entries {
			if i, ok := l.find(e.Key); !ok || l.node(i).gen <= e.Gen {
				l.addLocked(e.Key, e.Gen, e.Extent.Length)
			}
		}
	}
	for _, op := range l.journal {
		if op.drop {
			l.dropLocked(op.key, op.gen)
		} else {
			l.addLocked(op.key, op.gen, op.bytes)
		}
	}
	l.loading, l.journal = false, nil
	if invariants.Enabled {
		l.checkLocked()
	}
}

// checkLocked asserts the LRU's structure by walking all of it (load runs it, which is as
// long, under -tags invariants): the order is a ring through the sentinel of nodes each of
// which the index finds by its key, as many as the index has keys; the free nodes hold no
// key; the two are every node but the sentinel; and no key tracked has a lease pending.
func (l *lru) checkLocked() {
	linked, last := 0, uint32(0)
	for i := l.node(0).next; i != 0; last, i = i, l.node(i).next {
		n := l.node(i)
		if j, ok := l.find(n.key); !ok || j != i || n.prev != last || linked >= int(l.n) {
			invariants.Failf("txn: the LRU's order is a ring of its tracked keys, each found by the index",
				"node %d (%q): index %d (%v), prev %d after %d, %d of %d nodes", i, n.key, j, ok, n.prev, last, linked, l.n)
		}
		linked++
	}
	free := 0
	for i := l.free; i != 0; i = l.node(i).next {
		if l.node(i).key != "" || free >= int(l.n) {
			invariants.Failf("txn: the LRU's free nodes hold no key", "node %d (%q), %d of %d nodes", i, l.node(i).key, free, l.n)
		}
		free++
	}
	if l.node(0).prev != last || linked != l.byKey.Len() || linked+free != int(l.n)-1 {
		invariants.Failf("txn: every LRU node but the sentinel is tracked or free, and the index has the tracked keys",
			"%d linked (last %d, the sentinel's prev %d), %d free, %d nodes, %d keys indexed", linked, last, l.node(0).prev, free, l.n, l.byKey.Len())
	}
	for key := range l.pending {
		if _, ok := l.find(key); ok {
			invariants.Failf("txn: a pending lease is of a key not tracked yet", "key %q", key)
		}
	}
}

// touchAll marks the tracked ones of keys as just used, in order (the last the most recent),
// under one hold of the lock: a BatchGet touches the keys it reads once, before its reads,
// not once per key (with 32 concurrent readers of 4 KiB objects, per-key touches were half
// the mutex wait of a profile).
func (l *lru) touchAll(keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, key := range keys {
		if i, ok := l.find(key); ok {
			l.unlink(i)
			l.pushBack(i)
		}
	}
}

// lease keeps key from eviction until t (a later lease may extend it, never shorten it).
// A key not tracked yet keeps the lease until add. It returns false, leasing nothing, for a
// key chosen for an eviction that may be under way.
func (l *lru) lease(key string, t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i, ok := l.find(key); ok {
		n := l.node(i)
		if n.evicting {
			return false
		}
		n.leaseUntil = max(n.leaseUntil, unixNano(t))
		return true
	}
	if t.After(l.pending[key]) {
		l.pending[key] = t
	}
	if len(l.pending) > maxPendingLeases {
		now := time.Now()
		for k, until := range l.pending {
			if until.Before(now) {
				delete(l.pending, k)
			}
		}
	}
	return true
}

// drop forgets key at generation gen (0: any).
func (l *lru) drop(key string, gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loading {
		l.journal = append(l.journal, lruOp{key: key, gen: gen, drop: true})
		return
	}
	l.dropLocked(key, gen)
}

func (l *lru) dropLocked(key string, gen uint64) {
	if i, ok := l.find(key); ok && (gen == 0 || l.node(i).gen == gen) {
		l.unlink(i)
		if j, ok := l.byKey.Remove(key, l.keyAt); invariants.Enabled && (!ok || j != i) {
			invariants.Failf("txn: the LRU's index finds each tracked key's node", "key %q: node %d, the index had %d (%v)", key, i, j, ok)
		}
		*l.node(i) = lruNode{next: l.free} // drops the key string too
		l.free = i
	}
}

// oldest returns the least recently used entries without a current lease worth at least
// bytes (fewer if there are not enough), without removing them, and marks them evicting
// until drop or spare: from now on they cannot be leased.
func (l *lru) oldest(bytes int64) []lruEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []lruEntry
	now := time.Now().UnixNano()
	for i := l.node(0).next; i != 0 && bytes > 0; i = l.node(i).next {
		n := l.node(i)
		if n.leaseUntil > now {
			continue
		}
		n.evicting = true
		out = append(out, lruEntry{key: n.key, gen: n.gen, bytes: int64(n.bytes), evicting: true})
		if n.leaseUntil != 0 {
			out[len(out)-1].leasedUntil = time.Unix(0, n.leaseUntil)
		}
		bytes -= int64(n.bytes)
	}
	return out
}

// spare clears the evicting mark of victims whose eviction did not happen.
func (l *lru) spare(victims []lruEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range victims {
		if i, ok := l.find(v.key); ok && l.node(i).gen == v.gen {
			l.node(i).evicting = false
		}
	}
}
