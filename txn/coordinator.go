package txn

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
)

// Coordinator runs batch offloads as transactions over an IntentLog, Buckets and Meta. Its
// state is split by job, each part with its own lock (lock order: doc.go): the in-flight
// table (inflight), the intent table with WAL truncation (intents), the evictor with its
// LRU (ev), and the reclaimer that frees bytes (reclaim).
type Coordinator struct {
	cfg  Config
	log  IntentLog
	data Buckets
	meta Meta
	lg   *slog.Logger
	sem  chan struct{} // in-flight transaction slots

	inflight flightTable // keys being written and calls in progress
	intents  intentTable // unresolved intents; orders WAL truncation after intent appends
	ev       *evictor    // the quota: the LRU of this node's keys and the evictions
	// lruFollows is set by start-up collection just before it reads the metadata it loads
	// the LRU from; until then the FSM hooks leave the LRU alone (hooks.go), so the Raft log
	// replayed at start-up does not build an LRU that collection then rebuilds.
	lruFollows atomic.Bool
	reclaim    *reclaimer // pins, deferred frees, and the goroutine that frees applied removals

	remote Remote // reads of keys other nodes own; nil on a single node

	failed     atomic.Pointer[error]
	removed    atomic.Pointer[error] // MarkRemoved's cause
	onUnusable func(error)           // OnUnusable's
	closed     atomic.Bool
	bg         sync.WaitGroup
	bgCtx      context.Context
	bgCancel   context.CancelFunc

	stats counters
}

// flightTable is the single-flight table: the keys being written and by which transaction,
// and the calls in progress by txn ID. Under its lock, together with the FSM, it decides
// whether a key is committed, in flight, or free (plan, batchExists).
type flightTable struct {
	mu      sync.Mutex
	flights map[string]*flight     // key -> the transaction writing it
	running map[fsm.TxnID]*running // txn ID -> a call in progress (retries join it)
}

// flight is a key being written by one transaction; other transactions wait on done.
type flight struct {
	done chan struct{}
	sum  uint64
	size uint32
	v    verdict // the writing transaction's, once done is closed
}

// running is a call in progress for a txn ID.
type running struct {
	sig     uint64 // signature of the call's objects: a retry must send the same batch
	done    chan struct{}
	results []kvoffload.KeyResult
	err     error
}

// New returns a coordinator. Call Recover before serving.
func New(cfg Config, log IntentLog, data Buckets, meta Meta) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Coordinator{
		cfg:      cfg,
		log:      log,
		data:     data,
		meta:     meta,
		lg:       lg.With("pkg", "txn", "node", cfg.NodeID),
		sem:      make(chan struct{}, cfg.MaxInFlight),
		inflight: flightTable{flights: map[string]*flight{}, running: map[fsm.TxnID]*running{}},
		intents:  intentTable{unresolved: map[uint64]fsm.TxnID{}},
		bgCtx:    ctx,
		bgCancel: cancel,
	}
	c.reclaim = newReclaimer(data, c.lg, func() { c.stats.removed.Add(1) })
	c.ev = &evictor{capacity: cfg.Capacity, commitTimeout: cfg.CommitTimeout, data: data, reclaim: c.reclaim,
		lg: c.lg, evicted: &c.stats.evicted, propose: c.propose, resolved: c.onResolved, lru: newLRU()}
	return c, nil
}

// SetRemote installs the reader of keys whose bytes other nodes own. Call before serving.
func (c *Coordinator) SetRemote(r Remote) { c.remote = r }

// Close stops background resolution and the reclaimer, after it has freed what was queued.
// It does not close the seams.
func (c *Coordinator) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.bgCancel()
	c.bg.Wait()
	c.reclaim.close()
	return nil
}

// Usable is nil while the coordinator serves: ErrClosed after Close, ErrFailed (wrapping the
// cause) after a fail-stop, ErrRemoved (wrapping the leader's refusal) after MarkRemoved.
func (c *Coordinator) Usable() error {
	if c.closed.Load() {
		return ErrClosed
	}
	if p := c.failed.Load(); p != nil {
		return fmt.Errorf("%w: %w", ErrFailed, *p)
	}
	if p := c.removed.Load(); p != nil {
		return fmt.Errorf("%w: %w", ErrRemoved, *p)
	}
	return nil
}

// MarkRemoved records that the leader refused this node as outside the cluster
// configuration (why is its refusal): from then on every call fails at once with ErrRemoved,
// instead of waiting for a leader this node will no longer hear from (it is not told of its
// removal: the leader stops replicating to it). Only the first cause is kept.
func (c *Coordinator) MarkRemoved(why error) {
	if c.removed.CompareAndSwap(nil, &why) {
		c.lg.Error("this node was removed from the cluster: it refuses every call; stop it (a restart with this data directory refuses to start)", "err", why)
		if c.onUnusable != nil {
			c.onUnusable(why)
		}
	}
}

// OnUnusable installs fn, called with the cause when the coordinator stops serving for good:
// a fail-stop, or MarkRemoved (once for each, on the goroutine that hit it; it must not
// block). Call before serving.
func (c *Coordinator) OnUnusable(fn func(error)) { c.onUnusable = fn }

// FailStop records err, a fatal error of a layer below the coordinator (the Raft log cannot
// be written), as a fail-stop: from then on Usable fails with ErrFailed wrapping it.
func (c *Coordinator) FailStop(err error) { c.failStop(err) }

// failStop records a fatal error: nothing more is accepted (fsync errors are never retried).
func (c *Coordinator) failStop(err error) {
	if c.failed.CompareAndSwap(nil, &err) {
		c.lg.Error("fail-stop: restart the process to recover", "err", err)
		if c.onUnusable != nil {
			c.onUnusable(err)
		}
	}
}

// endRecovery marks recovery done and frees the extents of removals applied before it that
// start-up collection adopted (holders: the adopted entries, as collect returns them) and
// whose holder no longer holds them. The others were collected as orphans already; the
// holder check matters for removals replayed from the Raft log at start-up, which may name an
// extent of an earlier bucket whose ID a new bucket took, where a live entry now sits. Only
// the holder can reference an adopted extent: it is live in the accounting, so no new record
// gets it.
func (c *Coordinator) endRecovery(holders adopted) {
	c.reclaim.endRecovery(func(deferred []bucketstore.Extent) {
		for _, ext := range deferred {
			key, adopted := holders.holder(ext)
			if !adopted {
				continue
			}
			if e, ok := c.meta.Lookup(key); !ok || e.Extent != ext {
				c.reclaim.free(ext)
			}
		}
	})
}
