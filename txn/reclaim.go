package txn

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/internal/invariants"
)

// reclaimer gives back the bytes of extents no metadata references any more. It owns the
// readers' pins, the frees deferred to the end of recovery, and the queue through which the
// FSM's hooks hand it the extents of applied removals: the hooks run on Raft's apply
// goroutine and only enqueue, and one goroutine of the reclaimer does the bucket I/O (hole
// punches, file removals, directory fsyncs), so a slow disk never stalls apply, WaitApplied
// or a read index.
//
// The queue is a slice of small records and is never full: a hook that blocked would put
// back-pressure on Raft, which is the thing this type exists to avoid. Its length is bounded
// by the data, not by a constant: one record per local extent whose removal was applied and
// is not yet freed, a few dozen bytes next to the metadata entry the FSM just dropped for it.
//
// Order: an extent is freed only after its removal is applied (the hook enqueues it then)
// and its last pin is dropped; a removal applied before recovery ends
// is deferred to the end of recovery, which is itself a record of the same queue, so "before"
// means before in apply order, whenever the goroutine gets to it.
type reclaimer struct {
	data Buckets
	lg   *slog.Logger

	mu        sync.Mutex
	cond      *sync.Cond // signalled when queue grows, done advances or closing is set
	pins      map[bucketstore.Extent]int
	doomed    map[bucketstore.Extent]bool // freed when their last pin drops
	queue     []reclaim                   // applied removals and the end of recovery, in order
	queued    uint64                      // records ever enqueued
	done      uint64                      // records the goroutine has finished
	recovered bool                        // the end of recovery has been processed
	deferred  []bucketstore.Extent        // applied removals waiting for the end of recovery
	closing   bool
	stopped   chan struct{} // closed when the goroutine has returned

	removed func() // counts an applied removal whose bytes are freed (Stats.Removed)
}

// reclaim is one record of the reclaimer's queue: the extent of an applied removal, or
// (endRecovery set) the end of start-up recovery.
type reclaim struct {
	ext         bucketstore.Extent
	endRecovery func(deferred []bucketstore.Extent) // frees what must be freed of deferred
}

func newReclaimer(data Buckets, lg *slog.Logger, removed func()) *reclaimer {
	r := &reclaimer{
		data:    data,
		lg:      lg,
		pins:    map[bucketstore.Extent]int{},
		doomed:  map[bucketstore.Extent]bool{},
		stopped: make(chan struct{}),
		removed: removed,
	}
	r.cond = sync.NewCond(&r.mu)
	go r.run()
	return r
}

// pin keeps ext from being freed while a reader uses it.
func (r *reclaimer) pin(ext bucketstore.Extent) {
	r.mu.Lock()
	r.pins[ext]++
	r.mu.Unlock()
}

// unpin drops a pin; the last pin of a doomed extent frees it, on the reader's goroutine.
func (r *reclaimer) unpin(ext bucketstore.Extent) {
	r.mu.Lock()
	if invariants.Enabled {
		if n := r.pins[ext]; n <= 0 {
			r.mu.Unlock()
			invariants.Failf("txn: a pin is dropped only while held", "extent %+v has %d pins", ext, n)
		}
	}
	r.pins[ext]--
	free := r.pins[ext] == 0 && r.doomed[ext]
	if r.pins[ext] == 0 {
		delete(r.pins, ext)
		delete(r.doomed, ext)
	}
	r.mu.Unlock()
	if free {
		r.freeNow(ext)
	}
}

// free releases ext at once, on the caller's goroutine, or when its last pin drops. Callers
// free only extents that no applied metadata references, and never from a Raft goroutine.
func (r *reclaimer) free(ext bucketstore.Extent) {
	r.mu.Lock()
	if r.pins[ext] > 0 {
		r.doomed[ext] = true
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.freeNow(ext)
}

// freeApplied enqueues the extent of an entry whose removal has just been applied. It never
// blocks on I/O: it is called from the FSM's hooks on Raft's apply goroutine. After close
// the record is dropped; start-up orphan collection reclaims the bytes.
func (r *reclaimer) freeApplied(ext bucketstore.Extent) {
	r.enqueue(reclaim{ext: ext})
}

// endRecovery enqueues the end of recovery behind every removal applied so far and waits
// until it is processed: fn is then called, on the reclaimer's goroutine, with the extents
// of the removals applied before it, and later removals are freed as they come.
func (r *reclaimer) endRecovery(fn func(deferred []bucketstore.Extent)) {
	r.enqueue(reclaim{endRecovery: fn})
	r.flush(context.Background())
}

func (r *reclaimer) enqueue(rec reclaim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		r.lg.Debug("reclaimer closed; extent left for orphan collection", "extent", rec.ext)
		return
	}
	r.queue = append(r.queue, rec)
	r.queued++
	r.cond.Broadcast()
}

// flush waits until every record enqueued before the call is processed, the reclaimer has
// stopped, or ctx ends (the frees then go on without the caller). Callers that just had a
// removal applied call it so that its bytes are free when they return, as they were when the
// hooks freed synchronously: Remove, an eviction before the Reserve it makes room for. Never
// call it from a Raft goroutine. It returns ctx's error if ctx ended first.
func (r *reclaimer) flush(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	target := r.queued
	for r.done < target && !r.exited() && ctx.Err() == nil {
		r.cond.Wait()
	}
	if r.done < target && !r.exited() {
		return ctx.Err()
	}
	return nil
}

func (r *reclaimer) exited() bool {
	select {
	case <-r.stopped:
		return true
	default:
		return false
	}
}

// closeWait bounds how long close waits for the record being processed (a stalled free).
const closeWait = 2 * time.Second

// close stops the reclaimer: records not yet processed are dropped (their bytes are orphans,
// which the next start-up's collection frees), and it waits at most closeWait for the one
// being processed: Close must not hang behind a stalled disk
// (TestCloseReturnsWhileFreeStalls).
func (r *reclaimer) close() {
	r.mu.Lock()
	r.closing = true
	r.cond.Broadcast()
	r.mu.Unlock()
	select {
	case <-r.stopped:
	case <-time.After(closeWait):
	}
}

// stopping reports whether close was called.
func (r *reclaimer) stopping() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closing
}

// run is the reclaimer's goroutine: it takes the queue in batches and processes each record
// outside the lock.
func (r *reclaimer) run() {
	defer func() {
		r.mu.Lock()
		close(r.stopped)
		r.cond.Broadcast()
		r.mu.Unlock()
	}()
	for {
		r.mu.Lock()
		for len(r.queue) == 0 && !r.closing {
			r.cond.Wait()
		}
		batch := r.queue
		r.queue = nil
		r.mu.Unlock()
		if len(batch) == 0 {
			return // closing, and everything queued is done
		}
		for _, rec := range batch {
			if r.stopping() {
				return // the rest are dropped: orphans for the next start-up
			}
			r.process(rec)
		}
		r.mu.Lock()
		r.done += uint64(len(batch))
		if invariants.Enabled && r.done > r.queued {
			r.mu.Unlock()
			invariants.Failf("txn: the reclaimer finishes only records it was given", "%d done, %d queued", r.done, r.queued)
		}
		r.cond.Broadcast()
		r.mu.Unlock()
	}
}

func (r *reclaimer) process(rec reclaim) {
	if rec.endRecovery != nil {
		r.mu.Lock()
		r.recovered = true
		deferred := r.deferred
		r.deferred = nil
		r.mu.Unlock()
		rec.endRecovery(deferred)
		return
	}
	r.mu.Lock()
	if !r.recovered {
		// Start-up collection may already have adopted these bytes from a metadata copy taken
		// before the removal: the end of recovery decides.
		r.deferred = append(r.deferred, rec.ext)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.removed()
	r.free(rec.ext)
}

func (r *reclaimer) freeNow(ext bucketstore.Extent) {
	if err := r.data.Free(ext); errors.Is(err, bucketstore.ErrNotLive) {
		r.lg.Debug("free: extent already released", "extent", ext)
	} else if err != nil {
		// The bytes stay allocated; start-up orphan collection reclaims them.
		r.lg.Warn("free failed; left for orphan collection", "extent", ext, "err", err)
	}
}
