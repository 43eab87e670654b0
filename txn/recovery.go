package txn

import (
	"context"
	"fmt"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/failpoint"
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
}

type pendingIntent struct {
	index      uint64
	in         intent
	dataFailed bool // a DATA_FAILED mark follows the intent: abort, never roll forward
}

// Recover runs start-up recovery (DESIGN.md §3): wait until the FSM has caught up; resolve
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
	for _, id := range sortedIDs(pending) {
		if err := c.resolveIntent(ctx, id, pending[id], &rep); err != nil {
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
		if err := c.log.TruncateFront(last); err != nil {
			return rep, fmt.Errorf("txn: recovery: truncating the WAL: %w", err)
		}
		_ = failpoint.Hit(failpoint.WALTruncateAfter)
	}
	c.endRecovery(holders)
	c.stats.recovered.Add(uint64(rep.RolledFwd))
	c.stats.recoveryAbort.Add(uint64(rep.Aborted))
	c.stats.orphanBytes.Add(uint64(rep.OrphanBytes))
	c.lg.Info("recovery done", "intents", rep.Intents, "unresolved", rep.Unresolved,
		"rolled_forward", rep.RolledFwd, "aborted", rep.Aborted, "orphan_bytes", rep.OrphanBytes)
	return rep, nil
}

// scanIntents returns the intents that have no DONE record.
func (c *Coordinator) scanIntents() (map[fsm.TxnID]pendingIntent, int, error) {
	pending := map[fsm.TxnID]pendingIntent{}
	total := 0
	err := c.log.Replay(func(index uint64, rec wal.Record) error {
		id := fsm.TxnID(rec.TxnID)
		switch rec.Type {
		case wal.RecordIntent:
			in, err := decodeIntent(rec.Payload)
			if err != nil {
				return fmt.Errorf("wal index %d: %w", index, err)
			}
			pending[id] = pendingIntent{index: index, in: in}
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
	return pending, total, nil
}

func sortedIDs(m map[fsm.TxnID]pendingIntent) []fsm.TxnID {
	ids := make([]fsm.TxnID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	// WAL order, so a roll-forward sees the same generations the original commit would have.
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && m[ids[j]].index < m[ids[j-1]].index; j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
	return ids
}

// resolveIntent decides one unresolved intent. Extents are not freed here: orphan collection
// frees everything the metadata does not reference, after every intent is resolved.
func (c *Coordinator) resolveIntent(ctx context.Context, id fsm.TxnID, p pendingIntent, rep *RecoveryReport) error {
	if _, ok := c.meta.TxnResult(id); ok {
		rep.AlreadyDone++
	} else if bad := c.verifyIntent(id, p); bad == "" {
		if _, err := c.propose(ctx, p.in.commit(id)); err != nil {
			return fmt.Errorf("txn: recovery: re-proposing commit of %s: %w", id, err)
		}
		rep.RolledFwd++
	} else {
		abort := fsm.EncodeAbort(fsm.Abort{TxnID: id, Node: p.in.Node, Reason: "recovery: " + bad})
		if _, err := c.propose(ctx, abort); err != nil {
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
		if _, err := c.data.Read(e.extent(), e.header(id)); err != nil {
			return fmt.Sprintf("record of %q: %v", e.Key, err)
		}
		if !seen[e.Bucket] {
			seen[e.Bucket] = true
			buckets = append(buckets, e.Bucket)
		}
	}
	if err := c.data.Sync(buckets...); err != nil {
		return fmt.Sprintf("fdatasync before roll-forward: %v", err)
	}
	return ""
}

// collect makes the extents the metadata references on this node the live set of each bucket
// (Collect adopts them into the space accounting) and frees every other byte of the files (orphans of crashed, aborted or superseded transactions).
// It returns the key that held each adopted extent.
func (c *Coordinator) collect(ctx context.Context, rep *RecoveryReport) (map[bucketstore.Extent]string, error) {
	live := map[uint32][]bucketstore.Extent{}
	keysOf := map[uint32][]fsm.KeyGen{}
	holders := map[bucketstore.Extent]string{}
	c.meta.ForEach(func(e fsm.Entry) bool {
		if e.Owner == c.cfg.NodeID {
			c.lru.add(e.Key, e.Gen, e.Extent.Length)
			holders[bucketExtent(e.Extent)] = e.Key
			live[e.Extent.Bucket] = append(live[e.Extent.Bucket], bucketExtent(e.Extent))
			keysOf[e.Extent.Bucket] = append(keysOf[e.Extent.Bucket], fsm.KeyGen{Key: e.Key, Gen: e.Gen})
		}
		return true
	})
	onDisk := map[uint32]bool{}
	for _, b := range c.data.Buckets() {
		onDisk[b] = true
		freed, err := c.data.Collect(b, live[b])
		if err != nil {
			return nil, fmt.Errorf("txn: recovery: collecting bucket %d: %w", b, err)
		}
		rep.OrphanBytes += freed
		_ = failpoint.Hit(failpoint.RecoveryGC)
	}
	for b, exts := range live {
		if !onDisk[b] {
			if err := c.dropLost(ctx, b, keysOf[b], rep); err != nil {
				return nil, err
			}
			continue
		}
		rep.LiveExtents += len(exts) // Collect adopted them into the accounting
	}
	return holders, nil
}

// dropLost removes the metadata of keys whose bucket file no longer exists (lost outside the
// store's control), so reads report NotFound instead of failing forever.
func (c *Coordinator) dropLost(ctx context.Context, bucket uint32, keys []fsm.KeyGen, rep *RecoveryReport) error {
	c.lg.Error("bucket file missing; removing its keys from metadata", "bucket", bucket, "keys", len(keys))
	cmd := fsm.EncodeRemove(fsm.Remove{TxnID: NewTxnID(), Keys: keys, Reason: fmt.Sprintf("bucket %d lost", bucket)})
	if _, err := c.propose(ctx, cmd); err != nil {
		return fmt.Errorf("txn: recovery: dropping keys of lost bucket %d: %w", bucket, err)
	}
	rep.LostKeys += len(keys)
	return nil
}
