package txn

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// The LRU's order, generations and leases agree with a plain slice model over random adds,
// touches, drops (freed nodes are reused), leases and evictions.
func TestLRUOrderModel(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 9))
	type item struct {
		key      string
		gen      uint64
		bytes    int64
		leased   bool
		evicting bool
	}
	var model []item // least recently used first
	find := func(k string) int { return slices.IndexFunc(model, func(it item) bool { return it.key == k }) }
	l := newLRU()
	future := time.Now().Add(time.Hour)
	for step := range 6000 {
		k, op := fmt.Sprintf("k%d", rng.IntN(64)), rng.IntN(6)
		if step < 2500 && step%2 == 0 {
			k, op = fmt.Sprintf("wide%d", step), 0 // adds past one page of nodes
		}
		switch op {
		case 0, 1: // add
			gen, bytes := uint64(rng.IntN(4)+1), int64(rng.IntN(8)+1)<<12
			it := item{key: k, gen: gen, bytes: bytes}
			if j := find(k); j >= 0 {
				it.leased = model[j].leased
				model = slices.Delete(model, j, j+1)
			}
			model = append(model, it)
			l.add(k, gen, bytes)
		case 2: // touch
			if j := find(k); j >= 0 {
				it := model[j]
				model = append(slices.Delete(model, j, j+1), it)
			}
			l.touchAll([]string{k})
		case 3: // drop, by generation or any
			gen := uint64(rng.IntN(5))
			if j := find(k); j >= 0 && (gen == 0 || model[j].gen == gen) {
				model = slices.Delete(model, j, j+1)
			}
			l.drop(k, gen)
		case 4: // lease a tracked key
			if j := find(k); j >= 0 {
				want := !model[j].evicting
				if got := l.lease(k, future); got != want {
					t.Fatalf("step %d: lease(%s) = %v, want %v", step, k, got, want)
				}
				model[j].leased = model[j].leased || want
			}
		case 5: // choose victims, then spare them
			need := int64(rng.IntN(6)+1) << 12
			var want []string
			left := need
			for j := range model {
				if left <= 0 {
					break
				}
				if !model[j].leased {
					model[j].evicting = true
					want = append(want, model[j].key)
					left -= model[j].bytes
				}
			}
			got := l.oldest(need)
			var keys []string
			for _, v := range got {
				keys = append(keys, v.key)
				if j := find(v.key); model[j].gen != v.gen || model[j].bytes != v.bytes {
					t.Fatalf("step %d: victim %+v, model %+v", step, v, model[j])
				}
			}
			if !slices.Equal(keys, want) {
				t.Fatalf("step %d: oldest(%d) = %q, want %q", step, need, keys, want)
			}
			if rng.IntN(2) == 0 {
				l.spare(got)
				for _, k := range keys {
					model[find(k)].evicting = false
				}
			}
		}
		if l.byKey.Len() != len(model) {
			t.Fatalf("step %d: %d keys tracked, model %d", step, l.byKey.Len(), len(model))
		}
	}
	var order []string
	for i := l.node(0).next; i != 0; i = l.node(i).next {
		order = append(order, l.node(i).key)
	}
	var want []string
	for _, it := range model {
		want = append(want, it.key)
	}
	if !slices.Equal(order, want) {
		t.Fatalf("final order %q, model %q", order, want)
	}
}
