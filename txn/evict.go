package txn

import (
	"context"
	"errors"
	"sync"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/failpoint"
)

// evictor is the eviction side of the capacity: the LRU of the keys this node owns, and the
// lock that lets one eviction run at a time.
type evictor struct {
	mu  sync.Mutex // held for a whole eviction, across its REMOVE proposal
	lru *lru
}

// evictHeadroom is the fraction of Capacity evicted beyond what one reservation needs, so
// that a full store does not run one eviction per write.
const evictHeadroom = 16

// reserveEvicting reserves size bytes; when the bucket store is at capacity it evicts the
// least recently used keys this node owns and tries again. Eviction removes the keys from
// the metadata through Raft first; their bytes are freed when the removal is applied
// (OnApplied) and their readers have finished, never before.
func (c *Coordinator) reserveEvicting(ctx context.Context, size int64) (bucketstore.Extent, error) {
	ext, err := c.data.Reserve(size)
	for attempt := 0; attempt < 3 && errors.Is(err, bucketstore.ErrNoSpace) && c.cfg.Capacity > 0; attempt++ {
		if evicted := c.evict(ctx, size+c.cfg.Capacity/evictHeadroom); evicted == 0 {
			break
		}
		ext, err = c.data.Reserve(size)
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
func (c *Coordinator) enforceQuota(ctx context.Context) int {
	if c.cfg.Capacity <= 0 {
		return 0
	}
	total := 0
	for range maxQuotaRounds {
		st, err := c.data.Stats()
		if err != nil || st.LiveBytes <= c.cfg.Capacity {
			break
		}
		n := c.evict(ctx, st.LiveBytes-c.cfg.Capacity+c.cfg.Capacity/evictHeadroom)
		if n == 0 {
			c.lg.Warn("over the quota and nothing can be evicted", "live_bytes", st.LiveBytes, "capacity", c.cfg.Capacity)
			break
		}
		total += n
	}
	if total > 0 {
		st, _ := c.data.Stats()
		c.lg.Info("evicted to bring live bytes under the quota", "keys", total, "live_bytes", st.LiveBytes, "capacity", c.cfg.Capacity)
	}
	return total
}

// evict removes the least recently used keys worth about need bytes and returns how many
// keys it removed. One eviction runs at a time; a caller that waited for another one gets
// its effect through its next Reserve.
func (c *Coordinator) evict(ctx context.Context, need int64) int {
	c.ev.mu.Lock()
	defer c.ev.mu.Unlock()
	victims := c.ev.lru.oldest(need)
	if len(victims) == 0 {
		return 0
	}
	if err := failpoint.Hit(failpoint.EvictChosen); err != nil {
		c.ev.lru.spare(victims)
		return 0
	}
	kg := make([]fsm.KeyGen, len(victims))
	for i, v := range victims {
		kg[i] = fsm.KeyGen{Key: v.key, Gen: v.gen}
	}
	id := kvoffload.NewTxnID()
	res, err := c.propose(ctx, fsm.EncodeRemove(fsm.Remove{TxnID: id, Keys: kg, Reason: "evicted: capacity"}))
	if err != nil {
		c.lg.Warn("eviction failed", "keys", len(kg), "err", err)
		// The REMOVE may still apply: its victims stay unleasable until the metadata has an
		// outcome for its txn ID (the REMOVE, or an ABORT that pre-empts it); then the victims
		// still tracked, which the REMOVE did not take, are spared.
		c.onResolved(id, func(*fsm.Result) { c.ev.lru.spare(victims) })
		return 0
	}
	n := 0
	for _, ko := range res.Keys {
		if ko.Outcome == fsm.OutcomeRemoved {
			n++
		}
	}
	for _, v := range victims {
		c.ev.lru.drop(v.key, v.gen) // removed, or gone already: either way not a candidate
	}
	// The victims' bytes are free when the caller reserves again; a stalled disk bounds the
	// wait by CommitTimeout, not by the caller's context (an offload's write has none).
	fctx, cancel := context.WithTimeout(ctx, c.cfg.CommitTimeout)
	flushed := c.reclaim.flush(fctx) == nil
	cancel()
	c.stats.evicted.Add(uint64(n))
	c.lg.Debug("evicted", "keys", n, "need_bytes", need)
	_ = failpoint.Hit(failpoint.EvictRemoved)
	if !flushed {
		c.lg.Warn("evicted keys' bytes not freed yet (disk stalled?): not evicting more", "keys", n)
		return 0 // the caller stops: evicting more would not free bytes any sooner
	}
	return max(n, 1)
}
