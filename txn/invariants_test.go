//go:build invariants

package txn

import (
	"log/slog"
	"testing"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/invariants"
)

// With -tags invariants, each bookkeeping of the coordinator panics at a change it does not
// allow: an intent resolved that was never registered, a pin dropped that was never taken,
// and an LRU node unlinked whose neighbours do not point at it.
func TestInvariantsFire(t *testing.T) {
	check := func(t *testing.T, want string, fn func()) {
		t.Helper()
		if v := invariants.Catch(fn); v == nil || v.Invariant != want {
			t.Fatalf("violation %v, want %q", v, want)
		}
	}
	t.Run("intent", func(t *testing.T) {
		it := intentTable{unresolved: map[uint64]fsm.TxnID{}}
		check(t, "txn: an intent is resolved once, after it was registered", func() { it.resolved(7) })
	})
	t.Run("pin", func(t *testing.T) {
		r := newReclaimer(nil, slog.New(slog.DiscardHandler), func() {})
		defer r.close()
		ext := bucketstore.Extent{Bucket: 1, Length: 4096}
		r.pin(ext)
		r.unpin(ext)
		check(t, "txn: a pin is dropped only while held", func() { r.unpin(ext) })
	})
	t.Run("lru", func(t *testing.T) {
		l := newLRU()
		l.add("a", 1, 4096)
		l.add("b", 1, 4096)
		i, _ := l.find("b")
		l.node(i).prev = i // b no longer follows a
		check(t, "txn: the LRU's order is a ring of its tracked keys", func() { l.drop("b", 0) })
	})
}
