package txn

import (
	"cmp"
	"math/bits"
	"slices"
	"strings"

	"github.com/kvoffload/kvoffload/fsm"
)

// place is an entry's extent start and its position in the slice being ordered (ownSorted).
type place struct {
	off    int64
	bucket uint32
	at     uint32
}

// sortPlaces sorts order by (bucket, offset), ties (corrupt metadata: two entries at one
// offset) by the key at each one's position, so the order does not depend on the order the
// metadata handed them out in. It is a radix sort of (bucket, offset / 4096) packed into 64
// bits (the offsets of entries fsm.CheckEntry accepts are aligned), stable, so ties only need
// ordering by key within their run: at 1M keys a comparison sort took ~0.1 s of a 1M-key
// start-up (node's BenchmarkStartup), the radix sort a fifth of it. Places that do not pack
// into 64 bits (offsets or bucket IDs near their types' limits) are comparison-sorted.
func sortPlaces(order []place, keyAt func(at uint32) string) {
	byKey := func(a, b place) int { return strings.Compare(keyAt(a.at), keyAt(b.at)) }
	if !radixSortPlaces(order) {
		slices.SortFunc(order, func(a, b place) int {
			if c := cmp.Or(cmp.Compare(a.bucket, b.bucket), cmp.Compare(a.off, b.off)); c != 0 {
				return c
			}
			return byKey(a, b) // only on a tie: cmp.Or would compare the keys every time
		})
		return
	}
	for lo := 0; lo < len(order); {
		hi := lo + 1
		for hi < len(order) && order[hi].bucket == order[lo].bucket && order[hi].off == order[lo].off {
			hi++
		}
		if hi-lo > 1 {
			slices.SortFunc(order[lo:hi], byKey)
		}
		lo = hi
	}
}

// radixDigit is the bits sorted per pass: 4096 counters, three passes for 1 GiB buckets
// numbered up to a few thousand.
const radixDigit = 12

// radixSortPlaces sorts order stably by (bucket, offset) with a least-significant-digit radix
// sort and reports true, or leaves order alone and reports false when an offset is negative
// or unaligned or the packed key would need more than 64 bits.
func radixSortPlaces(order []place) bool {
	if len(order) < 2 {
		return true
	}
	var maxPage int64
	var maxBucket uint32
	for _, p := range order {
		if p.off < 0 || p.off%fsm.ExtentAlignment != 0 {
			return false
		}
		maxPage, maxBucket = max(maxPage, p.off/fsm.ExtentAlignment), max(maxBucket, p.bucket)
	}
	pageBits := bits.Len64(uint64(maxPage))
	width := pageBits + bits.Len32(maxBucket)
	if width > 64 {
		return false
	}
	key := func(p place) uint64 { return uint64(p.bucket)<<pageBits | uint64(p.off/fsm.ExtentAlignment) }
	src, dst := order, make([]place, len(order))
	for shift := 0; shift < width; shift += radixDigit {
		var start [1 << radixDigit]int
		for _, p := range src {
			start[key(p)>>shift&(1<<radixDigit-1)]++
		}
		sum := 0
		for d, n := range start {
			start[d], sum = sum, sum+n
		}
		for _, p := range src {
			d := key(p) >> shift & (1<<radixDigit - 1)
			dst[start[d]] = p
			start[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &order[0] {
		copy(order, src)
	}
	return true
}
