package fsm

import (
	"hash/maphash"
	"runtime"
	"slices"
)

// KeyIndex maps keys to the slots of a slab that holds them (the caller's: keyOf returns the
// key at a slot): an open-addressing hash table (linear probing, backward-shift deletion) of
// uint64 cells, each a slot and 32 bits of its key's hash, tag<<32 | (slot+1), 0 for an empty
// cell. A key costs 8 to 16 bytes here (the table is kept between 3/8 and 3/4 full), where a
// Go map[string]uint32 costs ~48 at 1M keys (issue 9, memory per key); the key itself is the
// slab's. A cell's home is derived from its tag, so growing needs no key. It is the live
// entries' index here (liveset.go) and txn's LRU's. Not safe for concurrent use; the zero
// value is an empty index. Slots are below 2^32 - 1.
type KeyIndex struct {
	cells []uint64
	n     int
}

// indexSeed seeds the key hash: random per process, so no input can be made to collide.
var indexSeed = maphash.MakeSeed()

func keyTag(key string) uint32 { return uint32(maphash.String(indexSeed, key) >> 32) }

// home is the first cell a tag probes.
func (x *KeyIndex) home(tag uint32) int { return int(uint64(tag) * uint64(len(x.cells)) >> 32) }

// Find returns the slot of key.
func (x *KeyIndex) Find(key string, keyOf func(slot uint32) string) (uint32, bool) {
	i, ok := x.cell(key, keyOf)
	if !ok {
		return 0, false
	}
	return uint32(x.cells[i]) - 1, true
}

// cell returns the cell holding key.
func (x *KeyIndex) cell(key string, keyOf func(uint32) string) (int, bool) {
	if x.n == 0 {
		return 0, false
	}
	tag := keyTag(key)
	for i := x.home(tag); ; i = (i + 1) & (len(x.cells) - 1) {
		c := x.cells[i]
		if c == 0 {
			return 0, false
		}
		if uint32(c>>32) == tag && keyOf(uint32(c)-1) == key {
			return i, true
		}
	}
}

// Warm loads the home cell of each of n keys (keys(0) to keys(n-1)) into the CPU's
// cache. At 1M keys the cells are tens of MiB, so a
// Find or Insert of a key not looked up lately waits ~100 ns for memory; the loads of
// this loop do not depend on each other, so the CPU overlaps them, and the Finds and
// Inserts that follow hit the cache (BenchmarkApplyCommit: a COMMIT warms its keys first).
func (x *KeyIndex) Warm(keys func(i int) string, n int) {
	if x.n == 0 {
		return
	}
	x.eachGroup(n, keys, func(int, []uint32) {})
}

// eachGroup hashes the n keys warmGroup at a time, loads each group's home cells, and then
// calls fn with the group's first index and tags. The loads are the point (runtime.KeepAlive
// keeps them); nothing shared is written, so readers call it under a read lock.
func (x *KeyIndex) eachGroup(n int, keys func(i int) string, fn func(lo int, tags []uint32)) {
	var tags [warmGroup]uint32
	var sum uint64
	for lo := 0; lo < n; lo += warmGroup {
		m := min(warmGroup, n-lo)
		for j := range m {
			tags[j] = keyTag(keys(lo + j))
		}
		for _, t := range tags[:m] {
			sum += x.cells[x.home(t)]
		}
		fn(lo, tags[:m])
	}
	runtime.KeepAlive(sum)
}

// warmGroup is the keys whose home cells Warm and InsertAll load together: the hashing is
// done first, so that the loads of a group issue back to back and overlap (hashing between
// them kept fewer of them in flight: a 1M-key load into an empty index took 140 ms that
// way, ~90 ms this way).
const warmGroup = 64

// Insert adds key at slot; the key must not be in the index.
func (x *KeyIndex) Insert(key string, slot uint32) {
	if (x.n+1)*4 > len(x.cells)*3 {
		x.grow()
	}
	x.place(uint64(keyTag(key))<<32 | uint64(slot+1))
	x.n++
}

func (x *KeyIndex) place(c uint64) {
	for i := x.home(uint32(c >> 32)); ; i = (i + 1) & (len(x.cells) - 1) {
		if x.cells[i] == 0 {
			x.cells[i] = c
			return
		}
	}
}

// InsertAll adds n keys, key(i) at slot(i) for i < n, none of them in the index yet. It is
// Insert for a bulk load: the table is sized once for all of them, and the home cells of each
// group of keys are loaded (as Warm does) before any of them is placed, so the CPU waits for
// memory about once per group instead of once per key (txn's LRU load of 1M keys at start-up:
// ~140 ms key by key, ~90 ms this way).
func (x *KeyIndex) InsertAll(n int, key func(i int) string, slot func(i int) uint32) {
	x.Reserve(n)
	x.eachGroup(n, key, func(lo int, tags []uint32) {
		for j, t := range tags {
			x.place(uint64(t)<<32 | uint64(slot(lo+j)+1))
		}
		x.n += len(tags)
	})
}

// Reserve makes room for n more keys, so that inserting them grows the table at most once
// now rather than by doubling as they come (a load of 1M keys rehashed ~1.5M cells on the way).
func (x *KeyIndex) Reserve(n int) {
	size := max(16, len(x.cells))
	for (x.n+n)*4 > size*3 {
		size *= 2
	}
	if size > len(x.cells) {
		x.resize(size)
	}
}

func (x *KeyIndex) grow() { x.resize(max(16, 2*len(x.cells))) }

// resize moves every cell into a table of size cells (a power of two holding them all).
func (x *KeyIndex) resize(size int) {
	old := x.cells
	x.cells = make([]uint64, size)
	for _, c := range old {
		if c != 0 {
			x.place(c)
		}
	}
}

// Remove takes key out of the index and returns its slot.
func (x *KeyIndex) Remove(key string, keyOf func(slot uint32) string) (uint32, bool) {
	i, ok := x.cell(key, keyOf)
	if !ok {
		return 0, false
	}
	slot := uint32(x.cells[i]) - 1
	mask := len(x.cells) - 1
	// Backward shift: move each later cell of the run whose home is not in (i, j] into the
	// hole, so every key stays reachable from its home without tombstones.
	for j := (i + 1) & mask; x.cells[j] != 0; j = (j + 1) & mask {
		h := x.home(uint32(x.cells[j] >> 32))
		if i <= j && (h <= i || h > j) || i > j && h <= i && h > j {
			x.cells[i], i = x.cells[j], j
		}
	}
	x.cells[i] = 0
	x.n--
	return slot, true
}

// Len returns the number of keys in the index.
func (x *KeyIndex) Len() int { return x.n }

// Clone returns an independent copy.
func (x *KeyIndex) Clone() KeyIndex { return KeyIndex{cells: slices.Clone(x.cells), n: x.n} }
