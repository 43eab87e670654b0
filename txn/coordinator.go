package txn

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
)

// Coordinator runs batch offloads as transactions over an IntentLog, Buckets and Meta.
type Coordinator struct {
	cfg  Config
	log  IntentLog
	data Buckets
	meta Meta
	lg   *slog.Logger
	sem  chan struct{} // in-flight transaction slots

	mu      sync.Mutex
	flights map[string]*flight     // key -> the transaction writing it
	running map[fsm.TxnID]*running // txn ID -> a call in progress (retries join it)

	// truncMu orders WAL truncation after every intent append in progress: appenders hold
	// it shared from Append until the intent is registered in unresolved.
	truncMu    sync.RWMutex
	unresMu    sync.Mutex
	unresolved map[uint64]fsm.TxnID // WAL index of an unresolved INTENT -> its txn ID

	evictMu sync.Mutex // one eviction at a time
	lru     *lru       // keys this node owns, least recently used first

	pinMu  sync.Mutex
	pins   map[bucketstore.Extent]int
	doomed map[bucketstore.Extent]bool // freed when their last pin drops

	remote Remote // reads of keys other nodes own; nil on a single node

	failed    atomic.Pointer[error]
	closed    atomic.Bool
	recovered atomic.Bool
	// deferMu orders freeApplied against the end of recovery: an extent whose removal is
	// applied before recovery has finished is freed when it finishes (deferred), not lost.
	deferMu  sync.Mutex
	deferred []bucketstore.Extent
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc

	stats counters
}

// flight is a key being written by one transaction; other transactions wait on done.
type flight struct {
	done    chan struct{}
	sum     uint64
	size    uint32
	outcome Outcome
	reason  string
}

// running is a call in progress for a txn ID.
type running struct {
	sig     uint64 // signature of the call's objects: a retry must send the same batch
	done    chan struct{}
	results []KeyResult
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
	return &Coordinator{
		cfg:        cfg,
		log:        log,
		data:       data,
		meta:       meta,
		lg:         lg.With("pkg", "txn", "node", cfg.NodeID),
		sem:        make(chan struct{}, cfg.MaxInFlight),
		flights:    map[string]*flight{},
		running:    map[fsm.TxnID]*running{},
		unresolved: map[uint64]fsm.TxnID{},
		pins:       map[bucketstore.Extent]int{},
		lru:        newLRU(),
		doomed:     map[bucketstore.Extent]bool{},
		bgCtx:      ctx,
		bgCancel:   cancel,
	}, nil
}

// SetRemote installs the reader of keys whose bytes other nodes own. Call before serving.
func (c *Coordinator) SetRemote(r Remote) { c.remote = r }

// NewTxnID returns a random 128-bit transaction ID.
func NewTxnID() fsm.TxnID {
	var id fsm.TxnID
	if _, err := rand.Read(id[:]); err != nil {
		panic(fmt.Sprintf("txn: crypto/rand failed: %v", err))
	}
	return id
}

// Close stops background resolution. It does not close the seams.
func (c *Coordinator) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.bgCancel()
	c.bg.Wait()
	return nil
}

func (c *Coordinator) usable() error {
	if c.closed.Load() {
		return ErrClosed
	}
	if p := c.failed.Load(); p != nil {
		return fmt.Errorf("%w: %w", ErrFailed, *p)
	}
	return nil
}

// failStop records a fatal error: nothing more is accepted (fsync errors are never retried).
func (c *Coordinator) failStop(err error) {
	if c.failed.CompareAndSwap(nil, &err) {
		c.lg.Error("fail-stop: restart the process to recover", "err", err)
	}
}

// pin keeps ext from being freed while a reader uses it.
func (c *Coordinator) pin(ext bucketstore.Extent) {
	c.pinMu.Lock()
	c.pins[ext]++
	c.pinMu.Unlock()
}

func (c *Coordinator) unpin(ext bucketstore.Extent) {
	c.pinMu.Lock()
	c.pins[ext]--
	free := c.pins[ext] == 0 && c.doomed[ext]
	if c.pins[ext] == 0 {
		delete(c.pins, ext)
		delete(c.doomed, ext)
	}
	c.pinMu.Unlock()
	if free {
		c.freeNow(ext)
	}
}

// free releases ext once no reader pins it. Callers free only extents that no applied
// metadata references.
func (c *Coordinator) free(ext bucketstore.Extent) {
	c.pinMu.Lock()
	if c.pins[ext] > 0 {
		c.doomed[ext] = true
		c.pinMu.Unlock()
		return
	}
	c.pinMu.Unlock()
	c.freeNow(ext)
}

// freeApplied frees the bytes of an entry whose removal has been applied (OnApplied,
// OnRestored). Before recovery has finished it defers them to its end: start-up collection
// may already have adopted them from a metadata copy taken before the removal.
func (c *Coordinator) freeApplied(ext bucketstore.Extent) {
	c.deferMu.Lock()
	if !c.recovered.Load() {
		c.deferred = append(c.deferred, ext)
		c.deferMu.Unlock()
		return
	}
	c.deferMu.Unlock()
	c.stats.removed.Add(1)
	c.free(ext)
}

// endRecovery marks recovery done and frees the extents freeApplied deferred that start-up
// collection adopted (holders: extent -> the key that held it) and whose holder no longer
// holds them. The others were collected as orphans already; the holder check matters for
// removals replayed from the Raft log at start-up, which may name an extent of an earlier
// bucket whose ID a new bucket took, where a live entry now sits. Only the holder can
// reference an adopted extent: it is live in the accounting, so no new record gets it.
func (c *Coordinator) endRecovery(holders map[bucketstore.Extent]string) {
	c.deferMu.Lock()
	c.recovered.Store(true)
	deferred := c.deferred
	c.deferred = nil
	c.deferMu.Unlock()
	for _, ext := range deferred {
		key, adopted := holders[ext]
		if !adopted {
			continue
		}
		if e, ok := c.meta.Lookup(key); !ok || bucketExtent(e.Extent) != ext {
			c.free(ext)
		}
	}
}

func (c *Coordinator) freeNow(ext bucketstore.Extent) {
	if err := c.data.Free(ext); errors.Is(err, bucketstore.ErrNotLive) {
		c.lg.Debug("free: extent already released", "extent", ext)
	} else if err != nil {
		// The bytes stay allocated; start-up orphan collection reclaims them.
		c.lg.Warn("free failed; left for orphan collection", "extent", ext, "err", err)
	}
}
