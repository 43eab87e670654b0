//go:build invariants

package bucketstore

import (
	"testing"

	"github.com/kvoffload/kvoffload/internal/invariants"
)

// With -tags invariants, a broken extent or byte accounting panics at the change that meets
// it: a fresh bucket's tail moved back under a live extent (its next reservation would own
// bytes twice), and LiveBytes dropped below a bucket's live bytes.
func TestInvariantsFire(t *testing.T) {
	s := mustOpen(t, memConfig(nil))
	size := RecordSize(3, 100)
	mustPut(t, s, "one", 1, 100)

	s.mu.Lock()
	s.open.tail -= size
	s.mu.Unlock()
	v := invariants.Catch(func() { _, _ = s.Reserve(size) })
	if v == nil || v.Invariant != "bucketstore: a fresh bucket's extents are handed out in offset order, below its tail" {
		t.Fatalf("Reserve over a live extent: violation %v", v)
	}

	s.mu.Lock()
	s.open.tail += size // past the extent the failed Reserve claimed: the accounting holds again
	s.live -= size
	s.mu.Unlock()
	v = invariants.Catch(func() { _, _ = s.Reserve(size) })
	if v == nil || v.Invariant != "bucketstore: 0 <= a bucket's live bytes <= LiveBytes, pending bytes >= 0" {
		t.Fatalf("Reserve with LiveBytes short: violation %v", v)
	}
	s.mu.Lock()
	s.live += size // repaired, so the recount of Close (checkLocked) passes
	s.mu.Unlock()
}
