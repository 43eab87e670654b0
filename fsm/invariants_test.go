//go:build invariants

package fsm

import (
	"testing"

	"github.com/kvoffload/kvoffload/internal/invariants"
)

// With -tags invariants, a derived structure out of step with the live entries panics at the
// apply that meets it: the byte counter short of a live entry, and a live entry missing from
// the extent index. (A panic in apply leaves the FSM locked: each case uses a fresh one.)
func TestInvariantsFire(t *testing.T) {
	for _, c := range []struct {
		name, invariant string
		breakIt         func(st *state)
	}{
		{"bytes", "fsm: the byte and owner counters equal a recount of the live entries",
			func(st *state) { st.bytes = 0 }},
		{"index", "fsm: the extent index holds every live entry",
			func(st *state) { clear(st.extents); st.lastList = nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := New()
			f.ApplyCommand(1, commit(1, ent("a", 1, 1)))
			mustCheck(t, f)
			c.breakIt(f.st)
			v := invariants.Catch(func() { f.ApplyCommand(2, remove(2, KeyGen{Key: "a"})) })
			if v == nil || v.Invariant != c.invariant {
				t.Fatalf("remove after breaking %s: violation %v, want %q", c.name, v, c.invariant)
			}
		})
	}
}
