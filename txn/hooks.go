package txn

import "github.com/kvoffload/kvoffload/fsm"

// The FSM's hooks (fsm.FSM.Watch, WatchRestore; installed by node.Open). They run on Raft's
// apply goroutine and must not block it: they update the LRU, which is in memory, and hand the
// extents of removed entries to the reclaimer's queue, whose goroutine frees them.

// OnRestored is called by the metadata layer after its state was replaced by a snapshot
// (a follower catching up by InstallSnapshot; start-up). The commands folded into the
// snapshot never went through OnApplied, so the LRU follows the diff, and the local bytes of
// entries the snapshot no longer holds are queued for the reclaimer as OnApplied queues
// removed ones (deferred to the end of recovery), only for a snapshot newer than the state it replaced (an older
// one would make entries "gone" that the log is about to bring back). An entry both
// committed and removed within what the snapshot folds, never live here, is not in the
// diff: its bytes stay until the next start-up's collection.
//
// An entry whose extent an entry live after the Restore still overlaps (d.Shared), or that
// names no record (fsm.CheckEntry), is not freed: see freeable.
func (c *Coordinator) OnRestored(d fsm.RestoreDiff) {
	shared := make(map[string]bool, len(d.Shared))
	for _, e := range d.Shared {
		shared[e.Key] = true
	}
	for _, e := range d.Gone {
		if e.Owner != c.cfg.NodeID {
			continue
		}
		if c.lruFollows.Load() {
			c.ev.lru.drop(e.Key, e.Gen)
		}
		if d.To > d.From && c.freeable(e, shared[e.Key]) {
			c.reclaim.freeApplied(e.Extent)
		}
	}
	if !c.lruFollows.Load() {
		return // start-up collection loads the LRU from the restored state (trackApplied)
	}
	for _, e := range d.Added {
		if e.Owner == c.cfg.NodeID && fsm.CheckEntry(e) == nil {
			c.ev.lru.add(e.Key, e.Gen, e.Extent.Length)
		}
	}
}

// freeable reports whether the bytes of e, an entry of this node just removed, may be freed:
// not when another live entry still references them (shared: a COMMIT that named another
// key's extent, accepted before apply refused overlaps), nor when e names no record
// (fsm.CheckEntry): such an extent was never this key's, and freeing it could take bytes
// that are someone else's. What is left is orphan garbage for start-up collection.
func (c *Coordinator) freeable(e fsm.Entry, shared bool) bool {
	if err := fsm.CheckEntry(e); err != nil || shared {
		c.lg.Warn("removed entry's bytes kept: another live entry references them, or it names no record",
			"key", e.Key, "extent", e.Extent, "shared", shared, "err", err)
		return false
	}
	return true
}

// OnApplied is called by the metadata layer after each command is applied on this node (in
// Raft log order), on Raft's apply goroutine. It keeps the LRU in step with the metadata and
// queues the local bytes of every key a REMOVE removed to the reclaimer, which frees them on
// its own goroutine: only after the removal is applied here, only once no reader pins them,
// and never while another live entry references them (freeable). Removals applied before
// recovery has finished are freed at its end (reclaimer.endRecovery).
func (c *Coordinator) OnApplied(res *fsm.Result) {
	c.trackApplied(res)
	if res.Type != fsm.CmdRemove {
		return
	}
	for _, ko := range res.Keys {
		if ko.Outcome == fsm.OutcomeRemoved && ko.Entry.Owner == c.cfg.NodeID && c.freeable(ko.Entry, ko.Shared) {
			c.reclaim.freeApplied(ko.Entry.Extent)
		}
	}
}

// trackApplied keeps the LRU in step with the metadata: keys this node stored join it, keys
// removed (by anyone) leave it.
//
// Before start-up collection loads the LRU (lruFollows) it does nothing: collection reads
// the metadata after setting lruFollows, so a command applied before that is in what it
// reads, and the LRU queues what the hook of one applied after it changes until collection
// has loaded that copy (lru.beginLoad, lru.load). Re-adding the LRU key by key
// while the Raft log replayed cost ~0.25 s of CPU per start-up at 1M keys.
func (c *Coordinator) trackApplied(res *fsm.Result) {
	if !c.lruFollows.Load() {
		return
	}
	for _, ko := range res.Keys {
		if ko.Entry.Owner != c.cfg.NodeID {
			continue
		}
		switch {
		case res.Type == fsm.CmdRemove && ko.Outcome == fsm.OutcomeRemoved:
			c.ev.lru.drop(ko.Key, ko.Entry.Gen)
		case res.Type == fsm.CmdCommit && ko.Outcome == fsm.OutcomeStored && ko.Entry.TxnID == res.TxnID:
			c.ev.lru.add(ko.Key, ko.Entry.Gen, ko.Entry.Extent.Length)
		}
	}
}
