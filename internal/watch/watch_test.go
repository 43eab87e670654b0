package watch

import (
	"context"
	"testing"
	"time"
)

// Listings are paced: after one that took d to build, the next waits listingPace x d, so a
// consumer asking for listing after listing holds the FSM's lock (and Raft's applies) at
// most 1/listingPace of the time; a waiter whose context ends stops waiting.
func TestListingsArePaced(t *testing.T) {
	w := newWatchers(4)
	if err := w.pace(context.Background()); err != nil {
		t.Fatalf("the first listing waits: %v", err)
	}
	w.built(40 * time.Millisecond)
	began := time.Now()
	if err := w.pace(context.Background()); err != nil || time.Since(began) < 150*time.Millisecond {
		t.Fatalf("the next listing started after %s (%v), want about %s", time.Since(began), err, listingPace*40*time.Millisecond)
	}
	w.built(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.pace(ctx); err == nil {
		t.Fatal("a waiter whose context ended was let through")
	}
}
