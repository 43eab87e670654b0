package txn

import (
	"testing"
	"time"
)

// A lease taken before the key is tracked (BatchExists saw the metadata before the FSM's
// apply hook added the key here) still protects it once added; re-adding keeps a lease.
func TestLeaseBeforeAdd(t *testing.T) {
	l := newLRU()
	l.lease("early", time.Now().Add(time.Hour))
	l.add("early", 1, 100)
	l.add("plain", 1, 100)
	if got := l.oldest(1 << 20); len(got) != 1 || got[0].key != "plain" {
		t.Fatalf("eviction candidates %+v, want only the unleased key", got)
	}
	l.add("early", 2, 100) // stored again
	if got := l.oldest(1 << 20); len(got) != 1 || got[0].key != "plain" {
		t.Fatalf("after re-adding: candidates %+v, want the lease kept", got)
	}
	l.lease("gone", time.Now().Add(-time.Second)) // expired, never added
	for i := range maxPendingLeases + 1 {
		l.lease(string(rune('a'+i%26))+"-"+string(rune(i)), time.Now().Add(-time.Second))
	}
	if n := len(l.pending); n > maxPendingLeases {
		t.Fatalf("%d pending leases, want at most %d", n, maxPendingLeases)
	}
}
