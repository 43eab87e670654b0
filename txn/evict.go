package txn

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/failpoint"
)

// evictor keeps the bytes this node holds under the quota (Config.Capacity): it owns the LRU
// of the keys this node owns, decides when to evict and which keys, and removes them through
// the metadata. The coordinator asks it for room (reserve) and, at the end of recovery, to
// come under the quota (enforceQuota); the FSM hooks, reads and leases update its LRU.
type evictor struct {
	capacity      int64         // Config.Capacity in bytes; 0 or less: no quota, no eviction
	commitTimeout time.Duration // Config.CommitTimeout: bounds the wait for the victims' frees
	data          Buckets       // Reserve and Stats (LiveBytes against the quota)
	reclaim       *reclaimer    // frees the victims' bytes once their REMOVE is applied
	lg            *slog.Logger
	evicted       *atomic.Uint64 // Stats.Evicted

	// propose proposes one encoded REMOVE (Coordinator.propose); resolved calls fn in the
	// background with the final result of a txn whose outcome is unknown
	// (Coordinator.onResolved).
	propose  func(ctx context.Context, cmd []byte, p proposal) (*fsm.Result, error)
	resolved func(id fsm.TxnID, fn func(*fsm.Result))

	mu  sync.Mutex // one eviction at a time, held across its REMOVE proposal and its flush
	lru *lru
}

// evictHeadroom is the fraction of Capacity evicted beyond what one reservation needs, so
// that a full store does not run one eviction per write.
const evictHeadroom = 16

// reserve reserves size bytes; when the bucket store is at capacity it evicts the
// least recently used keys this node owns and tries again. Eviction removes the keys from
// the metadata through Raft first; their bytes are freed when the removal is applied
// (OnApplied) and their readers have finished, never before.
func (v *evictor) reserve(ctx context.Context, size int64) (bucketstore.Extent, error) {
	ext, err := v.data.Reserve(size)
	for attempt := 0; attempt < 3 && errors.Is(err, bucketstore.ErrNoSpace) && v.capacity > 0; attempt++ {
		if evicted := v.evict(ctx, size+v.capacity/evictHeadroom); evicted == 0 {
			break
		}
		ext, err = v.data.Reserve(size)
	}
	return ext, err
}

// maxQuotaRounds bounds enforceQuota's evictions (each frees about what it was asked for).
const maxQuotaRounds = 64

// enforceQuota evicts the least recently used keys this node owns until its live bucket
// bytes are under the quota (Capacity) less the eviction headroom, and returns how many it
// evicted. Recovery calls it last, so a node restarted with a quota below what it holds comes
// back under it at once instead of staying over it until some write needs room. It stops
// early when nothing can be evicted (every key leased, or the removals fail).
func (v *evictor) enforceQuota(ctx context.Context) int {
	if v.capacity <= 0 {
		return 0
	}
	total := 0
	for range maxQuotaRounds {
		st, err := v.data.Stats()
		if err != nil || st.LiveBytes <= v.capacity {
			break
		}
		n := v.evict(ctx, st.LiveBytes-v.capacity+v.capacity/evictHeadroom)
		if n == 0 {
			v.lg.Warn("over the quota and nothing can be evicted", "live_bytes", st.LiveBytes, "capacity", v.capacity)
			break
		}
		total += n
	}
	if total > 0 {
		st, _ := v.data.Stats()
		v.lg.Info("evicted to bring live bytes under the quota", "keys", total, "live_bytes", st.LiveBytes, "capacity", v.capacity)
	}
	return total
}

// evict removes the least recently used keys worth about need bytes and returns how many
// keys it removed. One eviction runs at a time; a caller that waited for another one gets
// its effect through its next Reserve.
func (v *evictor) evict(ctx context.Context, need int64) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	victims := v.lru.oldest(need)
	if len(victims) == 0 {
		return 0
	}
	if err := failpoint.Hit(failpoint.EvictChosen); err != nil {
		v.lru.spare(victims)
		return 0
	}
	kg := make([]fsm.KeyGen, len(victims))
	for i, e := range victims {
		kg[i] = fsm.KeyGen{Key: e.key, Gen: e.gen}
	}
	id := kvoffload.NewTxnID()
	res, err := v.propose(ctx, fsm.EncodeRemove(fsm.Remove{TxnID: id, Keys: kg, Reason: "evicted: capacity"}), once)
	if err != nil {
		v.lg.Warn("eviction failed", "keys", len(kg), "err", err)
		// The REMOVE may still apply: its victims stay unleasable until the metadata has an
		// outcome for its txn ID (the REMOVE, or an ABORT that pre-empts it); then the victims
		// still tracked, which the REMOVE did not take, are spared.
		v.resolved(id, func(*fsm.Result) { v.lru.spare(victims) })
		return 0
	}
	n := 0
	for _, ko := range res.Keys {
		if ko.Outcome == fsm.OutcomeRemoved {
			n++
		}
	}
	for _, e := range victims {
		v.lru.drop(e.key, e.gen) // removed, or gone already: either way not a candidate
	}
	// The victims' bytes are free when the caller reserves again; a stalled disk bounds the
	// wait by CommitTimeout, not by the caller's context (an offload's write has none).
	fctx, cancel := context.WithTimeout(ctx, v.commitTimeout)
	flushed := v.reclaim.flush(fctx) == nil
	cancel()
	v.evicted.Add(uint64(n))
	v.lg.Debug("evicted", "keys", n, "need_bytes", need)
	_ = failpoint.Hit(failpoint.EvictRemoved)
	if !flushed {
		v.lg.Warn("evicted keys' bytes not freed yet (disk stalled?): not evicting more", "keys", n)
		return 0 // the caller stops: evicting more would not free bytes any sooner
	}
	return max(n, 1)
}
