package fsm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// InsertAll leaves the index as Insert one key at a time would: every key found at its slot,
// absent keys not found, removals working, into an empty index and into one that already
// holds keys (a group size that does not divide the count, and the empty load).
func TestKeyIndexInsertAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(testkit.Seed(t), 4))
	for _, pre := range []int{0, 1, 1000} {
		for _, n := range []int{0, 1, warmGroup - 1, warmGroup + 1, 5000} {
			keys := make([]string, pre+n)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d-%d", i, rng.Uint64())
			}
			keyOf := func(slot uint32) string { return keys[slot] }
			var x KeyIndex
			for i := range pre {
				x.Insert(keys[i], uint32(i))
			}
			x.InsertAll(n, func(i int) string { return keys[pre+i] }, func(i int) uint32 { return uint32(pre + i) })
			if x.Len() != pre+n {
				t.Fatalf("pre %d, n %d: Len %d", pre, n, x.Len())
			}
			for i, k := range keys {
				if slot, ok := x.Find(k, keyOf); !ok || slot != uint32(i) {
					t.Fatalf("pre %d, n %d: Find(%q) = %d, %v, want %d", pre, n, k, slot, ok, i)
				}
			}
			if _, ok := x.Find("absent", keyOf); ok {
				t.Fatalf("pre %d, n %d: found a key never inserted", pre, n)
			}
			for i := 0; i < len(keys); i += 2 {
				if slot, ok := x.Remove(keys[i], keyOf); !ok || slot != uint32(i) {
					t.Fatalf("pre %d, n %d: Remove(%q) = %d, %v", pre, n, keys[i], slot, ok)
				}
			}
			for i, k := range keys {
				if _, ok := x.Find(k, keyOf); ok != (i%2 == 1) {
					t.Fatalf("pre %d, n %d: after removing every other key, Find(%q) = %v", pre, n, k, ok)
				}
			}
		}
	}
}
