package bucketstore

import (
	"cmp"
	"slices"

	"github.com/kvoffload/kvoffload/internal/invariants"
)

// extentSet is the live extents of one bucket, by offset. A fresh bucket's records are added
// and freed one at a time, and they go in a map. A bucket collected at start-up is never
// written again (only a fresh bucket accepts writes), only freed from: Collect hands over its
// live extents in offset order and they are kept as that sorted list, a freed one marked, so
// that adopting 1M extents at start-up is one copy instead of 1M map inserts (~0.1 s of a
// 1M-key start-up, node's BenchmarkStartup -cpuprofile), in 16 bytes per extent. The zero
// value is an empty set.
type extentSet struct {
	m      map[int64]int64 // offset -> length: extents added one at a time
	sorted []span          // extents adopted by reset, in offset order; length 0: freed
	freed  int             // marked entries in sorted
}

// span is an extent of the bucket: its offset and length, both in bytes.
type span struct{ off, length int64 }

// reset makes the set exactly exts, which are sorted by offset and do not overlap, and
// returns their total length in bytes.
func (x *extentSet) reset(exts []Extent) (bytes int64) {
	x.m, x.freed = nil, 0
	x.sorted = make([]span, len(exts))
	for i, e := range exts {
		if invariants.Enabled && (e.Length <= 0 || i > 0 && exts[i-1].End() > e.Offset) {
			invariants.Failf("bucketstore: an adopted bucket's live extents are sorted, not empty and do not overlap",
				"extent %d of %d: %+v after %+v", i, len(exts), e, exts[max(i-1, 0)])
		}
		x.sorted[i] = span{e.Offset, e.Length}
		bytes += e.Length
	}
	return bytes
}

// length returns the length of the live extent at off, 0 if none starts there.
func (x *extentSet) length(off int64) int64 {
	if n, ok := x.m[off]; ok {
		return n
	}
	if i, ok := x.find(off); ok {
		return x.sorted[i].length
	}
	return 0
}

func (x *extentSet) find(off int64) (int, bool) {
	return slices.BinarySearchFunc(x.sorted, off, func(s span, off int64) int { return cmp.Compare(s.off, off) })
}

// add makes [off, off+length) live; false if an extent already starts at off.
func (x *extentSet) add(off, length int64) bool {
	if invariants.Enabled && length <= 0 {
		invariants.Failf("bucketstore: a live extent is not empty", "offset %d, length %d", off, length)
	}
	if x.length(off) != 0 {
		return false
	}
	if x.m == nil {
		x.m = map[int64]int64{}
	}
	x.m[off] = length
	return true
}

// del frees the extent at off, if one is live. Once half the sorted list is freed, it is
// compacted.
func (x *extentSet) del(off int64) {
	if _, ok := x.m[off]; ok {
		delete(x.m, off)
		return
	}
	i, ok := x.find(off)
	if !ok || x.sorted[i].length == 0 {
		return
	}
	x.sorted[i].length = 0
	if x.freed++; invariants.Enabled && x.freed > len(x.sorted) {
		invariants.Failf("bucketstore: the freed marks of a bucket's sorted extents are at most its extents",
			"%d marks, %d extents", x.freed, len(x.sorted))
	}
	if x.freed*2 >= len(x.sorted) {
		x.sorted = slices.DeleteFunc(x.sorted, func(s span) bool { return s.length == 0 })
		x.freed = 0
	}
}

// lengths calls fn with the length of every live extent (tests: the accounting check).
func (x *extentSet) lengths(fn func(int64)) {
	for _, n := range x.m {
		fn(n)
	}
	for _, s := range x.sorted {
		if s.length != 0 {
			fn(s.length)
		}
	}
}
