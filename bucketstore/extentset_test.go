package bucketstore

import (
	"maps"
	"slices"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// extentSet agrees with a map from offset to length through random frees and adds, from an
// adopted sorted list (compacted as it empties) and from nothing.
func TestExtentSetModel(t *testing.T) {
	rng := testkit.Rand(t)
	for round := range 50 {
		var x extentSet
		model := map[int64]int64{}
		if round%2 == 0 { // adopted, as Collect does
			var exts []Extent
			for off := int64(0); off < 400*4096; off += 4096 * int64(1+rng.IntN(3)) {
				exts = append(exts, Extent{Offset: off, Length: 4096})
				model[off] = 4096
			}
			x.reset(exts)
		}
		for range 1000 {
			off := int64(rng.IntN(800)) * 4096
			switch rng.IntN(3) {
			case 0, 1:
				x.del(off)
				delete(model, off)
			default:
				_, dup := model[off]
				if got := x.add(off, 8192); got == dup {
					t.Fatalf("round %d: add(%d) = %v with the extent live %v", round, off, got, dup)
				}
				if !dup {
					model[off] = 8192
				}
			}
			if got, want := x.length(off), model[off]; got != want {
				t.Fatalf("round %d: length(%d) = %d, want %d", round, off, got, want)
			}
		}
		var got []int64
		x.lengths(func(n int64) { got = append(got, n) })
		want := slices.Collect(maps.Values(model))
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: live lengths %v, want %v", round, got, want)
		}
		for off, n := range model {
			if x.length(off) != n {
				t.Fatalf("round %d: length(%d) = %d, want %d", round, off, x.length(off), n)
			}
		}
	}
}
