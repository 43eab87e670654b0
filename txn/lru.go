package txn

import (
	"container/list"
	"sync"
	"time"
)

// lru orders the keys whose bytes this node owns by last use (offload or read), oldest
// first: the eviction order when the bucket store's capacity is reached.
type lru struct {
	mu    sync.Mutex
	order *list.List // of *lruEntry, least recently used at the front
	byKey map[string]*list.Element
	// pending holds leases taken on keys not tracked yet: BatchExists can see a key in the
	// metadata just before the FSM's apply hook adds it here; add picks the lease up.
	pending map[string]time.Time
}

// maxPendingLeases bounds pending: beyond it, expired pending leases are dropped.
const maxPendingLeases = 4096

type lruEntry struct {
	key         string
	gen         uint64
	bytes       int64     // extent length: what freeing it gives back
	leasedUntil time.Time // not evicted before this (BatchExists with a lease)
	evicting    bool      // chosen by oldest; its REMOVE may be under way: no lease now
}

func newLRU() *lru {
	return &lru{order: list.New(), byKey: map[string]*list.Element{}, pending: map[string]time.Time{}}
}

// add records key as most recently used, keeping any lease taken on it.
func (l *lru) add(key string, gen uint64, bytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := &lruEntry{key: key, gen: gen, bytes: bytes, leasedUntil: l.pending[key]}
	delete(l.pending, key)
	if el, ok := l.byKey[key]; ok {
		if old := el.Value.(*lruEntry); old.leasedUntil.After(e.leasedUntil) {
			e.leasedUntil = old.leasedUntil
		}
		l.order.Remove(el)
	}
	l.byKey[key] = l.order.PushBack(e)
}

// touch marks key as just used, if it is tracked.
func (l *lru) touch(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.byKey[key]; ok {
		l.order.MoveToBack(el)
	}
}

// lease keeps key from eviction until t (a later lease may extend it, never shorten it).
// A key not tracked yet keeps the lease until add. It returns false, leasing nothing, for a
// key chosen for an eviction that may be under way.
func (l *lru) lease(key string, t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.byKey[key]; ok {
		e := el.Value.(*lruEntry)
		if e.evicting {
			return false
		}
		if t.After(e.leasedUntil) {
			e.leasedUntil = t
		}
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
	if el, ok := l.byKey[key]; ok && (gen == 0 || el.Value.(*lruEntry).gen == gen) {
		l.order.Remove(el)
		delete(l.byKey, key)
	}
}

// oldest returns the least recently used entries without a current lease worth at least
// bytes (fewer if there are not enough), without removing them, and marks them evicting
// until drop or spare: from now on they cannot be leased.
func (l *lru) oldest(bytes int64) []lruEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []lruEntry
	now := time.Now()
	for el := l.order.Front(); el != nil && bytes > 0; el = el.Next() {
		e := el.Value.(*lruEntry)
		if e.leasedUntil.After(now) {
			continue
		}
		e.evicting = true
		out = append(out, *e)
		bytes -= e.bytes
	}
	return out
}

// spare clears the evicting mark of victims whose eviction did not happen.
func (l *lru) spare(victims []lruEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range victims {
		if el, ok := l.byKey[v.key]; ok && el.Value.(*lruEntry).gen == v.gen {
			el.Value.(*lruEntry).evicting = false
		}
	}
}
