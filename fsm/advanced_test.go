package fsm

import "testing"

// Advanced's channel is closed by the next apply (and only then), and a channel taken after
// it is a new one: a waiter that takes it before reading HookedIndex misses no advance.
func TestAdvancedWakesOnApply(t *testing.T) {
	f := New()
	ch := f.Advanced()
	if f.Advanced() != ch {
		t.Fatal("two calls before an apply returned different channels")
	}
	select {
	case <-ch:
		t.Fatal("closed before any apply")
	default:
	}
	f.ApplyCommand(1, commit(1, ent("a", 1, 1)))
	select {
	case <-ch:
	default:
		t.Fatal("not closed by an apply")
	}
	if f.HookedIndex() != 1 {
		t.Fatalf("HookedIndex = %d, want 1", f.HookedIndex())
	}
	next := f.Advanced()
	select {
	case <-next:
		t.Fatal("a channel taken after the apply is already closed")
	default:
	}
	f.ApplyCommand(2, commit(1, ent("a", 1, 1))) // a repeat: de-duplicated, still applied
	select {
	case <-next:
	default:
		t.Fatal("not closed by a de-duplicated apply")
	}
}
