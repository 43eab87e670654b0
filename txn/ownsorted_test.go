package txn

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/txn/txntest"
)

// shuffledMeta hands out its entries, another owner's among them, in the order given.
type shuffledMeta struct {
	*txntest.Meta
	entries []fsm.Entry
}

func (m *shuffledMeta) LiveOf(owner string) []fsm.Entry {
	var out []fsm.Entry
	for _, e := range m.entries {
		if e.Owner == owner {
			out = append(out, e)
		}
	}
	return out
}

// ownSorted returns exactly this node's entries that fsm.CheckEntry accepts, in (bucket,
// offset, key) order, whatever order the metadata hands them out in: the in-place
// permutation loses, duplicates and misplaces none (random sizes cover cycles of every
// length, fixed points and the empty case).
func TestOwnSortedOrdersInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 11))
	for round := range 200 {
		n := rng.IntN(300)
		if round == 0 {
			n = 0
		}
		var entries, want []fsm.Entry
		var corrupt []string
		wide := round%4 == 3 // bucket IDs and offsets that do not pack into 64 bits: sortPlaces' comparison sort
		for i := range n {
			e := fsm.Entry{Key: fmt.Sprintf("k%d", i), Owner: "n1", Gen: 1, Size: 4096,
				Extent: fsm.Extent{Bucket: uint32(rng.IntN(4)), Offset: int64(rng.IntN(64)) * 8192, Length: 8192}}
			if wide {
				e.Extent.Bucket = math.MaxUint32 - uint32(rng.IntN(4))
				e.Extent.Offset = 1<<62 - int64(rng.IntN(64))*8192
			}
			switch rng.IntN(10) {
			case 0:
				e.Owner = "n2"
			case 1:
				e.Extent.Offset++ // misaligned: CheckEntry refuses it
				corrupt = append(corrupt, e.Key)
			default:
				want = append(want, e)
			}
			entries = append(entries, e)
		}
		slices.SortFunc(want, func(a, b fsm.Entry) int {
			return cmp.Or(cmp.Compare(a.Extent.Bucket, b.Extent.Bucket), cmp.Compare(a.Extent.Offset, b.Extent.Offset), strings.Compare(a.Key, b.Key))
		})
		c := &Coordinator{cfg: DefaultConfig("n1"), meta: &shuffledMeta{entries: entries}}
		var refused []string
		got := c.ownSorted(func(e fsm.Entry) { refused = append(refused, e.Key) })
		if !slices.Equal(got, want) {
			t.Fatalf("round %d (%d entries): ownSorted\n got  %v\n want %v", round, n, got, want)
		}
		if !slices.Equal(refused, corrupt) {
			t.Fatalf("round %d: refused %v, want %v", round, refused, corrupt)
		}
	}
}

// radixSortPlaces sorts what packs into 64 bits (stable: ties keep their order) and declines,
// leaving the order alone, what does not: an unaligned or negative offset, or a bucket ID and
// page number too wide together.
func TestRadixSortPlaces(t *testing.T) {
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 12))
	order := make([]place, 5000)
	for i := range order {
		order[i] = place{bucket: uint32(rng.IntN(3000)), off: int64(rng.IntN(1<<18)) * 4096, at: uint32(i)}
		if i%7 == 0 && i > 0 {
			order[i].bucket, order[i].off = order[i-1].bucket, order[i-1].off // ties
		}
	}
	want := slices.Clone(order)
	slices.SortStableFunc(want, func(a, b place) int {
		return cmp.Or(cmp.Compare(a.bucket, b.bucket), cmp.Compare(a.off, b.off))
	})
	if !radixSortPlaces(order) || !slices.Equal(order, want) {
		t.Fatalf("radix sort of %d places differs from a stable sort", len(order))
	}
	for _, bad := range [][]place{
		{{off: 4096}, {off: 4097}},
		{{off: 4096}, {off: -4096}},
		{{bucket: math.MaxUint32, off: 1 << 50}, {off: 0}},
	} {
		before := slices.Clone(bad)
		if radixSortPlaces(bad) || !slices.Equal(bad, before) {
			t.Errorf("radixSortPlaces(%v) sorted, want it declined and the order untouched", before)
		}
	}
}
