package fsm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// The live set (slab and hash index) agrees with a Go map over random adds and removes
// that grow the index several times and empty it again, with free slots reused; a clone
// taken midway is unaffected by later changes.
func TestLiveSetModel(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	var l liveSet
	model := map[string]Entry{}
	var snap liveSet
	var snapModel map[string]Entry
	for step := range 40000 {
		keys := 200 + step/10 // the key space grows, so the index grows past several sizes
		if step > 30000 {
			keys = 50 // then shrinks: most keys go, the slots are reused
		}
		k := fmt.Sprintf("k%d", rng.IntN(keys))
		if _, ok := model[k]; ok && rng.IntN(3) > 0 {
			l.del(k)
			delete(model, k)
		} else if !ok {
			e := Entry{Key: k, Gen: uint64(step + 1), Size: uint32(step)}
			l.add(e)
			model[k] = e
		}
		if step == 20000 {
			snap, snapModel = l.clone(), map[string]Entry{}
			for k, e := range model {
				snapModel[k] = e
			}
		}
		if step%997 == 0 {
			agree(t, &l, model, rng)
		}
	}
	agree(t, &l, model, rng)
	agree(t, &snap, snapModel, rng)
}

func agree(t *testing.T, l *liveSet, model map[string]Entry, rng *rand.Rand) {
	t.Helper()
	if err := l.check(); err != nil {
		t.Fatal(err)
	}
	if l.len() != len(model) {
		t.Fatalf("%d live, model %d", l.len(), len(model))
	}
	for k, want := range model {
		if got, ok := l.get(k); !ok || got != want {
			t.Fatalf("get(%q) = %+v %v, want %+v", k, got, ok, want)
		}
	}
	for range 100 {
		k := fmt.Sprintf("absent%d", rng.Uint64())
		if _, ok := l.get(k); ok {
			t.Fatalf("get(%q) found a key never added", k)
		}
	}
}
