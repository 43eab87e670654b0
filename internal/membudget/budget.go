// Package membudget bounds the value bytes a node holds in memory for the requests in
// progress (Budget).
package membudget

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Budget bounds the value bytes the gRPC service buffers across all requests
// (txn.Config.MaxBufferedBytes): BatchOffload's reassembled objects and BatchGet's results.
// A request takes a hold and acquires bytes before it buffers them; an acquisition that does
// not fit waits (back-pressure on that request's stream) until bytes are released or its
// context ends, and everything is released when the response has been sent.
//
// A request acquires in steps (an offload's objects arrive one after another, a read may find
// more than it looked up), so two requests could each hold part of the budget and wait for
// the other's part: the hold-and-wait of a deadlock. golang.org/x/sync/semaphore.Weighted
// has no notion of who holds what, so this is its own small semaphore that breaks the cycle:
// waiting holders are served before new requests, and when every request holding bytes is
// itself waiting (nothing held can be released), the oldest of them is granted its bytes
// over the limit. The bytes held then exceed the limit by at most that one request's batch
// (MaxBatchBytes); they stay within it otherwise.
type Budget struct {
	limit int64
	held  prometheus.Gauge   // bytes held now
	waits prometheus.Counter // acquisitions that had to wait

	mu       sync.Mutex
	used     int64
	holders  int // holds with bytes
	stuck    int // holds with bytes that are waiting for more
	queue    []*waiter
	nextHold uint64
}

type waiter struct {
	h     *Hold
	n     int64
	ready chan struct{} // closed when granted
}

// Hold is one request's share of the budget; Release returns it.
type Hold struct {
	b   *Budget
	seq uint64 // admission order: the oldest stuck holder is the one let over the limit
	n   int64
}

// New returns a budget of limit bytes; held tracks the bytes held, waits counts the
// acquisitions that had to wait.
func New(limit int64, held prometheus.Gauge, waits prometheus.Counter) *Budget {
	return &Budget{limit: limit, held: held, waits: waits}
}

// Limit is the budget's limit in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// NewHold returns a new request's hold, holding nothing.
func (b *Budget) NewHold() *Hold {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextHold++
	return &Hold{b: b, seq: b.nextHold}
}

// Acquire adds n bytes to h, waiting until they fit or ctx ends (then it returns ctx's error
// and h keeps what it had).
func (h *Hold) Acquire(ctx context.Context, n int64) error {
	if n <= 0 {
		return nil
	}
	b := h.b
	b.mu.Lock()
	if len(b.queue) == 0 && b.used+n <= b.limit {
		b.grant(h, n)
		b.mu.Unlock()
		return nil
	}
	w := &waiter{h: h, n: n, ready: make(chan struct{})}
	b.queue = append(b.queue, w)
	if h.n > 0 {
		b.stuck++
	}
	b.waits.Inc()
	b.dispatch()
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // granted meanwhile: the bytes are h's, released with it
		return nil
	default:
	}
	b.queue = slices.DeleteFunc(b.queue, func(x *waiter) bool { return x == w })
	if h.n > 0 {
		b.stuck--
	}
	b.dispatch()
	return ctx.Err()
}

// Release returns every byte h holds.
func (h *Hold) Release() {
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if h.n == 0 {
		return
	}
	b.used -= h.n
	b.holders--
	h.n = 0
	b.held.Set(float64(b.used))
	b.dispatch()
}

func (b *Budget) grant(h *Hold, n int64) {
	if h.n == 0 {
		b.holders++
	}
	h.n += n
	b.used += n
	b.held.Set(float64(b.used))
}

// dispatch grants waiters that fit, holders first (they finish and release sooner), then
// new requests in arrival order (a large one is not overtaken forever); then, if no holder
// is left outside the queue, the oldest waiting holder (or the first waiter, when nothing is
// held at all) over the limit. Called with b.mu held.
func (b *Budget) dispatch() {
	take := func(i int) {
		w := b.queue[i]
		b.queue = slices.Delete(b.queue, i, i+1)
		if w.h.n > 0 {
			b.stuck--
		}
		b.grant(w.h, w.n)
		close(w.ready)
	}
	for i := 0; i < len(b.queue); {
		if w := b.queue[i]; w.h.n > 0 && b.used+w.n <= b.limit {
			take(i)
			continue
		}
		i++
	}
	for len(b.queue) > 0 && b.queue[0].h.n == 0 && b.used+b.queue[0].n <= b.limit {
		take(0)
	}
	if len(b.queue) == 0 || b.stuck < b.holders {
		return
	}
	oldest := 0
	for i, w := range b.queue {
		if w.h.n > 0 && (b.queue[oldest].h.n == 0 || w.h.seq < b.queue[oldest].h.seq) {
			oldest = i
		}
	}
	take(oldest)
}

// Reserver is a read's budget hook (txn.Coordinator.BatchGetEach's reserve): it acquires the
// bytes the read's values will hold, waiting while the budget is taken or until ctx ends.
func (h *Hold) Reserver(ctx context.Context) func(int64) error {
	return func(n int64) error {
		if err := h.Acquire(ctx, n); err != nil {
			return fmt.Errorf("node: waiting for buffer space (MaxBufferedBytes %d) for %d bytes: %w", h.b.limit, n, err)
		}
		return nil
	}
}
