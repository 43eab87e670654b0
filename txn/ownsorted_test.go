package txn

import (
	"cmp"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/fsm"
)

var sortSeed = flag.Uint64("sort-seed", 0, "seed of TestOwnSortedOrdersInPlace (0: time-based)")

// shuffledMeta hands out its entries, another owner's among them, in the order given.
type shuffledMeta struct {
	flakyMeta
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
	rng := rand.New(rand.NewPCG(testSeed(t, *sortSeed, "TestOwnSortedOrdersInPlace", "sort-seed"), 11))
	for round := range 200 {
		n := rng.IntN(300)
		if round == 0 {
			n = 0
		}
		var entries, want []fsm.Entry
		var corrupt []string
		for i := range n {
			e := fsm.Entry{Key: fmt.Sprintf("k%d", i), Owner: "n1", Gen: 1, Size: 4096,
				Extent: fsm.Extent{Bucket: uint32(rng.IntN(4)), Offset: int64(rng.IntN(64)) * 8192, Length: 8192}}
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
