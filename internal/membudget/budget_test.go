package membudget

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

func testBudget(limit int64) *Budget {
	return New(limit, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "c"}))
}

// Two requests that each hold part of the budget and wait for more (hold-and-wait) do not
// deadlock: the oldest is let over the limit, finishes, and the other follows.
func TestBudgetHoldAndWait(t *testing.T) {
	b := testBudget(100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h1, h2 := b.NewHold(), b.NewHold()
	if err := h1.Acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	if err := h2.Acquire(ctx, 40); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- h2.Acquire(ctx, 50) }() // waits: h1 holds bytes and is not waiting
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("h2 was granted over the limit while h1 could still release: %v", err)
	default:
	}
	go func() { done <- h1.Acquire(ctx, 50) }() // now both wait: h1, the oldest, goes over
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h1.n != 110 || b.used != 150 {
		t.Fatalf("h1 holds %d, used %d; want h1 over the limit (110), used 150", h1.n, b.used)
	}
	h1.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h2.Release()
	if b.used != 0 || b.holders != 0 || b.stuck != 0 || len(b.queue) != 0 {
		t.Fatalf("after release: used %d holders %d stuck %d queue %d", b.used, b.holders, b.stuck, len(b.queue))
	}
}

// A waiter whose context ends leaves the queue and returns its error; what it held stays held.
func TestBudgetWaitCanceled(t *testing.T) {
	b := testBudget(10)
	h1, h2 := b.NewHold(), b.NewHold()
	if err := h1.Acquire(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := h2.Acquire(ctx, 1); err == nil {
		t.Fatal("granted over a full budget")
	}
	if len(b.queue) != 0 || waits(t, b) != 1 {
		t.Fatalf("queue %d waits %v", len(b.queue), waits(t, b))
	}
	h1.Release()
	if err := h2.Acquire(context.Background(), 10); err != nil || b.used != 10 {
		t.Fatalf("after release: %v used %d", err, b.used)
	}
}

// Randomized: requests acquire in random steps and release; every one finishes (no
// deadlock), and the bytes held never exceed the limit by more than one request's total.
func TestBudgetRandomized(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	const limit, maxReq = 1000, 600
	b := testBudget(limit)
	var peak atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for r := range 40 {
		steps := make([]int64, 1+rng.IntN(5))
		left := int64(1 + rng.IntN(maxReq))
		for i := range steps {
			steps[i] = left / int64(len(steps)-i)
			left -= steps[i]
		}
		pause := time.Duration(rng.IntN(300)) * time.Microsecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := b.NewHold()
			defer h.Release()
			for _, n := range steps {
				if err := h.Acquire(ctx, n); err != nil {
					t.Errorf("request %d: %v (deadlock?)", r, err)
					return
				}
				b.mu.Lock()
				u := b.used
				b.mu.Unlock()
				for p := peak.Load(); u > p && !peak.CompareAndSwap(p, u); p = peak.Load() {
				}
				time.Sleep(pause)
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > limit+maxReq {
		t.Fatalf("peak %d bytes held, over limit %d + one request %d", p, limit, maxReq)
	}
	if b.used != 0 {
		t.Fatalf("%d bytes still held", b.used)
	}
}

// waits is the count of b's acquisitions that had to wait.
func waits(t *testing.T, b *Budget) float64 {
	t.Helper()
	var m dto.Metric
	if err := b.waits.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.Counter.GetValue()
}
