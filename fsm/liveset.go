package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kvoffload/kvoffload/internal/invariants"
)

// liveSet holds the live entries: a slab of compact entries in fixed pages and a hash index
// from key to slot (issue 9, memory per key). A Go map[string]Entry held ~230 bytes per live
// key at 1M keys (the 96-byte Entry, its key header again as the map key, and the map's
// slack); here a key costs its 80-byte slot (the owner is a number: owners are few, node
// IDs) and ~8 to 16 bytes of index. Pages, not one growing slice: growing never copies the
// entries (that copying took a second of a 1M-key start-up) and leaves no slack but the last
// page's. Nothing of the state is ordered by the index or its seed: encodings sort by key.
type liveSet struct {
	// pages hold slots 0 to n-1 (pageSize each; the last one may be partly used). A free slot
	// is zero; every live entry has Gen >= 1 (apply makes nothing live at generation 0: it is
	// Stale; Restore refuses it), so gen 0 marks a free slot. The slab never shrinks: n is the
	// most keys live at once.
	pages [][]slotEntry
	n     uint32
	free  []uint32 // free slots, reused first
	idx   KeyIndex
	// owners numbers the owner strings of the entries ever made live in this set (node IDs:
	// the cluster's members, so a handful); never shrunk.
	owners  []string
	ownerNo map[string]uint32
}

// slotEntry is an Entry as the slab stores it: 80 bytes instead of 96.
type slotEntry struct {
	key    string
	offset int64
	length int64
	sum    uint64
	gen    uint64
	txn    TxnID
	bucket uint32
	size   uint32
	owner  uint32 // index into liveSet.owners
}

const (
	pageBits = 10
	pageSize = 1 << pageBits // slots per page: 80 KiB
)

func (l *liveSet) slotAt(i uint32) *slotEntry { return &l.pages[i>>pageBits][i&(pageSize-1)] }

// at returns the entry at slot i (i < l.n).
func (l *liveSet) at(i uint32) Entry {
	x := l.slotAt(i)
	return Entry{Key: x.key, Owner: l.owners[x.owner], Extent: Extent{Bucket: x.bucket, Offset: x.offset, Length: x.length},
		Size: x.size, Sum: x.sum, Gen: x.gen, TxnID: x.txn}
}

// keyAt returns the key at slot i (i < l.n).
func (l *liveSet) keyAt(i uint32) string { return l.slotAt(i).key }

// holds reports whether slot i holds a live entry.
func (l *liveSet) holds(i uint32) bool { return i < l.n && l.slotAt(i).gen != 0 }

// slot returns the slot of key's live entry.
func (l *liveSet) slot(key string) (uint32, bool) { return l.idx.Find(key, l.keyAt) }

// get returns key's live entry.
func (l *liveSet) get(key string) (Entry, bool) {
	if i, ok := l.slot(key); ok {
		return l.at(i), true
	}
	return Entry{}, false
}

// add makes e live and returns its slot, which stays e's until del; its key must not be
// live, and e.Gen must be at least 1.
func (l *liveSet) add(e Entry) uint32 {
	if e.Gen == 0 {
		panic(fmt.Sprintf("fsm: key %q made live at generation 0 (apply answers Stale, Restore refuses it)", e.Key))
	}
	if invariants.Enabled {
		if _, live := l.slot(e.Key); live {
			invariants.Failf("fsm: a key has at most one live entry", "key %q made live again", e.Key)
		}
	}
	o, ok := l.ownerNo[e.Owner]
	if !ok {
		if l.ownerNo == nil {
			l.ownerNo = map[string]uint32{}
		}
		o = uint32(len(l.owners))
		l.owners = append(l.owners, e.Owner)
		l.ownerNo[e.Owner] = o
	}
	var i uint32
	if n := len(l.free); n > 0 {
		i, l.free = l.free[n-1], l.free[:n-1]
	} else {
		if l.n%pageSize == 0 {
			l.pages = append(l.pages, make([]slotEntry, pageSize))
		}
		i = l.n
		l.n++
	}
	*l.slotAt(i) = slotEntry{key: e.Key, offset: e.Extent.Offset, length: e.Extent.Length, sum: e.Sum, gen: e.Gen,
		txn: e.TxnID, bucket: e.Extent.Bucket, size: e.Size, owner: o}
	l.idx.Insert(e.Key, i)
	return i
}

// del removes key's live entry, if any.
func (l *liveSet) del(key string) {
	if i, ok := l.idx.Remove(key, l.keyAt); ok {
		*l.slotAt(i) = slotEntry{}
		l.free = append(l.free, i)
	}
}

func (l *liveSet) len() int { return l.idx.Len() }

// each calls fn with every live entry, in slot order (no meaning), until fn returns false.
func (l *liveSet) each(fn func(Entry) bool) {
	for i := range l.n {
		if l.slotAt(i).gen != 0 && !fn(l.at(i)) {
			return
		}
	}
}

// values returns a copy of every live entry, in slot order.
func (l *liveSet) values() []Entry {
	out := make([]Entry, 0, l.len())
	l.each(func(e Entry) bool { out = append(out, e); return true })
	return out
}

// valuesOf returns a copy of the live entries of owner, in slot order; n is their number
// (the slice's capacity). Slots of other owners are skipped by the owner's number, without
// building their entries.
func (l *liveSet) valuesOf(owner string, n int) []Entry {
	out := make([]Entry, 0, n)
	o, ok := l.ownerNo[owner]
	if !ok {
		return out
	}
	for i := range l.n {
		if x := l.slotAt(i); x.gen != 0 && x.owner == o {
			out = append(out, l.at(i))
		}
	}
	return out
}

// sorted returns a copy of every live entry in key order.
func (l *liveSet) sorted() []Entry {
	entries := l.values()
	out := make([]Entry, len(entries))
	for i, at := range keyOrder(entries) {
		out[i] = entries[at]
	}
	return out
}

// keyOrder returns the positions of entries in key order. It sorts (key, position) pairs:
// half the time of sorting the 96-byte entries themselves at 1M keys.
func keyOrder(entries []Entry) []int {
	type keyAt struct {
		key string
		at  int
	}
	order := make([]keyAt, len(entries))
	for i := range entries {
		order[i] = keyAt{entries[i].Key, i}
	}
	slices.SortFunc(order, func(a, b keyAt) int { return strings.Compare(a.key, b.key) })
	at := make([]int, len(order))
	for i, k := range order {
		at[i] = k.at
	}
	return at
}

// check verifies that the index finds every entry of the slab at its slot and nothing else,
// and that the free slots are free (state.check).
func (l *liveSet) check() error {
	n := 0
	for i := range l.n {
		x := l.slotAt(i)
		if x.gen == 0 {
			if *x != (slotEntry{}) {
				return fmt.Errorf("live slot %d is free (generation 0) but holds key %q", i, x.key)
			}
			continue
		}
		n++
		if int(x.owner) >= len(l.owners) {
			return fmt.Errorf("live key %q: owner number %d of %d", x.key, x.owner, len(l.owners))
		}
		if j, ok := l.slot(x.key); !ok || j != i {
			return fmt.Errorf("live key %q at slot %d: the index finds slot %d (%v)", x.key, i, j, ok)
		}
	}
	if n != l.idx.Len() || n+len(l.free) != int(l.n) {
		return fmt.Errorf("%d live entries in %d slots, the index holds %d, %d slots free", n, l.n, l.idx.Len(), len(l.free))
	}
	return nil
}

// clone returns an independent copy.
func (l *liveSet) clone() liveSet {
	c := liveSet{pages: make([][]slotEntry, len(l.pages)), n: l.n, free: slices.Clone(l.free), idx: l.idx.Clone(),
		owners: slices.Clone(l.owners), ownerNo: maps.Clone(l.ownerNo)}
	for i, p := range l.pages {
		c.pages[i] = slices.Clone(p)
	}
	return c
}
