package txn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/mutant"
	"github.com/kvoffload/kvoffload/wal"
)

// RecoveryReport says what Recover found and did.
type RecoveryReport struct {
	Intents     int   // INTENT records in the WAL
	Unresolved  int   // intents without DONE
	AlreadyDone int   // unresolved intents the FSM already had an outcome for
	RolledFwd   int   // re-proposed COMMIT: every record verified
	Aborted     int   // proposed ABORT: some record missing or corrupt
	LiveExtents int   // extents referenced by metadata on this node
	OrphanBytes int64 // bytes freed by orphan collection
	LostKeys    int   // keys whose bucket file is gone (metadata repaired)
	CorruptKeys int   // keys whose metadata names no record of theirs (removed; bytes kept)
	Evicted     int   // keys evicted at the end to bring live bytes under the quota
}

type pendingIntent struct {
	id         fsm.TxnID
	index      uint64
	body       []byte // the INTENT body, decoded into in once the scan knows it is unresolved
	in         intent
	dataFailed bool // a DATA_FAILED mark follows the intent: abort, never roll forward
}

// Recover runs start-up recovery (docs/design.md, "Recovery"): wait until the FSM has caught up; resolve
// every intent without DONE (already decided in the FSM -> DONE; every record verifies ->
// re-propose COMMIT; otherwise ABORT); collect orphans (bytes that neither metadata nor an
// unresolved intent references); then drop the resolved WAL history. It is idempotent: a
// crash during recovery is followed by another recovery that converges to the same state.
func (c *Coordinator) Recover(ctx context.Context) (RecoveryReport, error) {
	var rep RecoveryReport
	if err := c.meta.Barrier(ctx); err != nil {
		return rep, fmt.Errorf("txn: recovery barrier: %w", err)
	}
	pending, total, err := c.scanIntents()
	if err != nil {
		return rep, err
	}
	_ = failpoint.Hit(failpoint.RecoveryScanned)
	rep.Intents, rep.Unresolved = total, len(pending)
	for _, p := range pending {
		if err := c.resolveIntent(ctx, p, &rep); err != nil {
			return rep, err
		}
		_ = failpoint.Hit(failpoint.RecoveryResolved)
	}
	if err := c.log.Sync(); err != nil {
		return rep, fmt.Errorf("txn: recovery: %w", err)
	}
	holders, err := c.collect(ctx, &rep)
	if err != nil {
		return rep, err
	}
	if last := c.log.LastIndex(); last > c.log.FirstIndex() {
		_ = failpoint.Hit(failpoint.WALTruncateBefore)
		if err := c.log.TruncateFront(last); errors.Is(err, wal.ErrNotTruncated) {
			// A full disk: the resolved history stays until a later truncation.
			c.lg.Warn("recovery: the WAL keeps its resolved history (no room to truncate it); free space on the data filesystem", "err", err)
		} else if err != nil {
			return rep, fmt.Errorf("txn: recovery: truncating the WAL: %w", err)
		}
		_ = failpoint.Hit(failpoint.WALTruncateAfter)
	}
	c.endRecovery(holders)
	rep.Evicted = c.ev.enforceQuota(ctx)
	c.stats.recovered.Add(uint64(rep.RolledFwd))
	c.stats.recoveryAbort.Add(uint64(rep.Aborted))
	c.stats.orphanBytes.Add(uint64(rep.OrphanBytes))
	c.lg.Info("recovery done", "intents", rep.Intents, "unresolved", rep.Unresolved, "already_decided", rep.AlreadyDone,
		"rolled_forward", rep.RolledFwd, "aborted", rep.Aborted, "orphan_bytes", rep.OrphanBytes, "evicted", rep.Evicted)
	return rep, nil
}

// scanIntents returns the intents that have no DONE record, decoded, in WAL order (so a
// roll-forward sees the same generations the original commit would have), and the number of
// INTENT records.
func (c *Coordinator) scanIntents() ([]pendingIntent, int, error) {
	pending := map[fsm.TxnID]pendingIntent{}
	total := 0
	err := c.log.Replay(func(index uint64, rec wal.Record) error {
		id := fsm.TxnID(rec.TxnID)
		switch rec.Type {
		case wal.RecordIntent:
			pending[id] = pendingIntent{id: id, index: index, body: rec.Payload}
			total++
		case wal.RecordDataFailed:
			if p, ok := pending[id]; ok {
				p.dataFailed = true
				pending[id] = p
			}
		case wal.RecordDone:
			delete(pending, id)
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("txn: recovery: replaying the WAL: %w", err)
	}
	// Only the unresolved intents are decoded: after a crash the WAL holds up to
	// TruncateEvery entries, most of them intents with their DONE, and decoding each one's
	// entries as it was read took ~0.1 s of a 1M-key start-up (storenode bench's child,
	// SIGKILLed). An intent's envelope checksum was verified as it was read.
	ordered := slices.SortedFunc(maps.Values(pending), func(a, b pendingIntent) int { return cmp.Compare(a.index, b.index) })
	for i := range ordered { // in WAL order: the first bad one is named
		p := &ordered[i]
		if p.in, err = decodeIntent(p.body); err != nil {
			return nil, 0, fmt.Errorf("txn: recovery: replaying the WAL: wal index %d: %w", p.index, err)
		}
		p.body = nil
	}
	return ordered, total, nil
}

// resolveIntent decides one unresolved intent. Extents are not freed here: orphan collection
// frees everything the metadata does not reference, after every intent is resolved.
func (c *Coordinator) resolveIntent(ctx context.Context, p pendingIntent, rep *RecoveryReport) error {
	id := p.id
	if _, ok := c.meta.TxnResult(id); ok {
		rep.AlreadyDone++
	} else if bad := c.verifyIntent(id, p); bad == "" || mutant.On(mutant.RollForwardUnverified) { // mutation test only
		if _, err := c.propose(ctx, p.in.commitCmd(id), once); err != nil {
			return fmt.Errorf("txn: recovery: re-proposing commit of %s: %w", id, err)
		}
		rep.RolledFwd++
	} else {
		abort := fsm.EncodeAbort(fsm.Abort{TxnID: id, Node: p.in.Node, Reason: fsm.AbortReason("recovery: " + bad)})
		if _, err := c.propose(ctx, abort, once); err != nil {
			return fmt.Errorf("txn: recovery: aborting %s: %w", id, err)
		}
		rep.Aborted++
	}
	c.log.AppendAsync(wal.Record{Type: wal.RecordDone, TxnID: id})
	return nil
}

// verifyIntent reads back every record of an intent and makes them durable; "" means all
// verify. The fdatasync matters: after a process crash the records may be readable only from
// the page cache, and a roll-forward must not commit metadata for bytes a power loss could
// still take away (G1).
func (c *Coordinator) verifyIntent(id fsm.TxnID, p pendingIntent) string {
	if p.dataFailed {
		return "its data failed to sync before the crash (DATA_FAILED mark)"
	}
	var buckets []uint32
	seen := map[uint32]bool{}
	for _, e := range p.in.Entries {
		if _, err := c.data.Read(e.Extent, recordHeader(e, id)); err != nil {
			return fmt.Sprintf("record of %q: %v", e.Key, err)
		}
		if !seen[e.Extent.Bucket] {
			seen[e.Extent.Bucket] = true
			buckets = append(buckets, e.Extent.Bucket)
		}
	}
	if err := c.data.Sync(buckets...); err != nil {
		return fmt.Sprintf("fdatasync before roll-forward: %v", err)
	}
	return ""
}

// collect makes the extents the metadata references on this node the live set of each bucket
// (Collect adopts them into the space accounting) and frees every other byte of the files
// (orphans of crashed, aborted or superseded transactions). Entries that no record can
// satisfy (ownEntries) are corrupt metadata: they are removed through Raft, and their extents
// are neither adopted nor freed. It returns the entries whose extents it adopted.
func (c *Coordinator) collect(ctx context.Context, rep *RecoveryReport) (adopted, error) {
	c.ev.lru.beginLoad()     // changes applied from here on are queued for load
	c.lruFollows.Store(true) // before the metadata is read: see trackApplied
	good, bad := c.ownEntries()
	// good is in (bucket, offset) order: each bucket's extents are one run of exts, and its
	// entries one run of good (byBucket), so no per-bucket slice grows key by key.
	exts := make([]bucketstore.Extent, len(good))
	live := map[uint32][]bucketstore.Extent{}
	byBucket := map[uint32][]fsm.Entry{}
	for lo := 0; lo < len(good); {
		b, hi := good[lo].Extent.Bucket, lo
		for ; hi < len(good) && good[hi].Extent.Bucket == b; hi++ {
			exts[hi] = good[hi].Extent
		}
		live[b], byBucket[b] = exts[lo:hi:hi], good[lo:hi:hi]
		lo = hi
	}
	// The LRU loads on a goroutine of its own while the buckets are collected: both only read
	// good, and at 1M keys each takes ~0.1 s of CPU (a CPU profile of node.Open).
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		c.ev.lru.load(good)
	}()
	defer func() { <-loaded }()
	c.dropCorrupt(ctx, bad, rep)
	onDisk := map[uint32]bool{}
	for _, b := range c.data.Buckets() {
		onDisk[b] = true
		if mutant.On(mutant.SkipOrphanCollect) { // mutation test only
			continue
		}
		freed, err := c.data.Collect(b, live[b])
		if err != nil {
			return nil, fmt.Errorf("txn: recovery: collecting bucket %d: %w", b, err)
		}
		rep.OrphanBytes += freed
		_ = failpoint.Hit(failpoint.RecoveryGC)
	}
	for b, exts := range live {
		if !onDisk[b] {
			keys := make([]fsm.KeyGen, len(byBucket[b]))
			for i, e := range byBucket[b] {
				keys[i] = fsm.KeyGen{Key: e.Key, Gen: e.Gen}
			}
			if err := c.dropLost(ctx, b, keys, rep); err != nil {
				return nil, err
			}
			continue
		}
		rep.LiveExtents += len(exts) // Collect adopted them into the accounting
	}
	return good, nil
}

// adopted is the entries start-up collection adopted, in (bucket, offset) order with no two
// at the same start (ownEntries keeps one entry of any overlapping group). It is searched
// instead of building a map from extent to key, which cost ~0.6 s of CPU per start-up at 1M
// keys (node's BenchmarkStartup, -cpuprofile).
type adopted []fsm.Entry

// holder returns the key of the entry whose extent is ext.
func (a adopted) holder(ext bucketstore.Extent) (string, bool) {
	i, ok := slices.BinarySearchFunc(a, ext, func(e fsm.Entry, x bucketstore.Extent) int {
		return cmp.Or(cmp.Compare(e.Extent.Bucket, x.Bucket), cmp.Compare(e.Extent.Offset, x.Offset))
	})
	if !ok || a[i].Extent != ext {
		return "", false
	}
	return a[i].Key, true
}

// dropLost removes the metadata of keys whose bucket file no longer exists (lost outside the
// store's control), so reads report NotFound instead of failing forever.
func (c *Coordinator) dropLost(ctx context.Context, bucket uint32, keys []fsm.KeyGen, rep *RecoveryReport) error {
	c.lg.Error("bucket file missing; removing its keys from metadata", "bucket", bucket, "keys", len(keys))
	cmd := fsm.EncodeRemove(fsm.Remove{TxnID: kvoffload.NewTxnID(), Keys: keys, Reason: fmt.Sprintf("bucket %d lost", bucket)})
	if _, err := c.propose(ctx, cmd, once); err != nil {
		return fmt.Errorf("txn: recovery: dropping keys of lost bucket %d: %w", bucket, err)
	}
	rep.LostKeys += len(keys)
	return nil
}

// ownEntries splits this node's live entries into those collection may adopt and those that
// are corrupt metadata: an entry fsm.CheckEntry refuses (a misaligned or over-long extent, a
// Length that does not match its Size), and, among entries whose extents overlap (a COMMIT
// that named another key's bytes, applied before apply refused overlaps), every one whose
// record does not verify. Adopting either would stop the node from starting (Collect refuses
// them) or let a removal free another key's bytes.
func (c *Coordinator) ownEntries() (good, bad []fsm.Entry) {
	mine := c.ownSorted(func(e fsm.Entry) {
		c.lg.Error("corrupt metadata at start-up; removing the key", "key", e.Key, "extent", e.Extent, "err", fsm.CheckEntry(e))
		bad = append(bad, e)
	})
	// good is filtered in place (it never passes lo, and a group is read before it is
	// written over): no second copy of every entry.
	good = mine[:0]
	for lo := 0; lo < len(mine); {
		hi, end := lo+1, mine[lo].Extent.Offset+mine[lo].Extent.Length
		for ; hi < len(mine) && mine[hi].Extent.Bucket == mine[lo].Extent.Bucket && mine[hi].Extent.Offset < end; hi++ {
			end = max(end, mine[hi].Extent.Offset+mine[hi].Extent.Length)
		}
		if hi-lo == 1 {
			good = append(good, mine[lo])
		} else {
			g, b := c.verifyOverlapping(mine[lo:hi])
			good, bad = append(good, g...), append(bad, b...)
		}
		lo = hi
	}
	return good, bad
}

// ownSorted returns this node's live entries that fsm.CheckEntry accepts, in (bucket,
// offset) order, and hands the others to corrupt. With 1M entries at start-up it works on the
// one copy Meta.LiveOf hands out: the accepted entries are kept in place, their 16-byte
// (bucket, offset, position) places sorted (sortPlaces), and the entries moved into that
// order in place (following the permutation's cycles), instead of gathering a second copy and
// laying out a third (two 96 MB copies and their collection cost ~0.2 s at 1M keys, node's
// BenchmarkStartup).
func (c *Coordinator) ownSorted(corrupt func(fsm.Entry)) []fsm.Entry {
	mine := c.meta.LiveOf(c.cfg.NodeID)
	n := 0
	for _, e := range mine {
		if fsm.CheckEntry(e) != nil {
			corrupt(e)
			continue
		}
		mine[n] = e
		n++
	}
	clear(mine[n:]) // no stale key strings kept alive past the end
	mine = mine[:n]
	order := make([]place, len(mine))
	for i, e := range mine {
		order[i] = place{off: e.Extent.Offset, bucket: e.Extent.Bucket, at: uint32(i)}
	}
	sortPlaces(order, func(at uint32) string { return mine[at].Key })
	// Position i takes the entry at order[i].at. Each cycle of that permutation is walked
	// once, moving one entry per step; a filled position is marked by pointing at itself.
	for i := range order {
		if order[i].at == uint32(i) {
			continue
		}
		held, j := mine[i], i
		for {
			from := int(order[j].at)
			order[j].at = uint32(j)
			if from == i {
				mine[j] = held
				break
			}
			mine[j] = mine[from]
			j = from
		}
	}
	return mine
}

// verifyOverlapping reads the records of entries whose extents overlap: at most one of them
// can be the record on disk. It is kept if it verifies; the others are corrupt metadata.
func (c *Coordinator) verifyOverlapping(group []fsm.Entry) (good, bad []fsm.Entry) {
	for _, e := range group {
		_, err := c.data.Read(e.Extent, recordHeader(e, e.TxnID))
		if err == nil && len(good) == 0 {
			good = append(good, e)
			continue
		}
		c.lg.Error("overlapping metadata at start-up; removing the key whose record does not verify",
			"key", e.Key, "extent", e.Extent, "err", err)
		bad = append(bad, e)
	}
	return good, bad
}

// dropCorrupt removes corrupt metadata entries found at start-up through Raft (by generation,
// so a key stored again since stays). A failure is logged, not fatal: the entries stay
// corrupt metadata, which reads answer Corrupt and remove, and the next start-up retries.
func (c *Coordinator) dropCorrupt(ctx context.Context, bad []fsm.Entry, rep *RecoveryReport) {
	if len(bad) == 0 {
		return
	}
	keys := make([]fsm.KeyGen, len(bad))
	for i, e := range bad {
		keys[i] = fsm.KeyGen{Key: e.Key, Gen: e.Gen}
	}
	cmd := fsm.EncodeRemove(fsm.Remove{TxnID: kvoffload.NewTxnID(), Keys: keys, Reason: "corrupt metadata"})
	if _, err := c.propose(ctx, cmd, once); err != nil {
		c.lg.Warn("removing corrupt metadata failed; reads will retry", "keys", len(keys), "err", err)
		return
	}
	rep.CorruptKeys += len(keys)
}
