package txn

import (
	"sync/atomic"

	"github.com/kvoffload/kvoffload"
)

// Stats are cumulative counters since the coordinator started.
type Stats struct {
	Txns          uint64 // batch offloads that wrote at least one key
	Stored        uint64 // keys committed by their own transaction
	AlreadyStored uint64 // keys found committed (including joined and in-batch duplicates)
	Joined        uint64 // keys that waited for another transaction's in-flight write
	Conflicts     uint64
	Rejected      uint64
	Failed        uint64
	Waits         uint64 // batches that waited for an in-flight slot (back-pressure)
	Aborts        uint64 // transactions resolved by ABORT
	Gets          uint64
	GetCorrupt    uint64
	Removed       uint64
	Recovered     uint64 // intents rolled forward at start-up
	RecoveryAbort uint64 // intents aborted at start-up
	OrphanBytes   uint64 // bytes freed by start-up orphan collection
	Evicted       uint64 // keys evicted to stay within the capacity
	// ReadIndexFailed counts reads whose misses could not be confirmed with the leader
	// within ReadIndexTimeout (answered Unavailable by BatchGet, Unknown by BatchExists).
	ReadIndexFailed uint64
}

type counters struct {
	txns, stored, already, joined, conflicts, rejected, failed, waits, aborts                  atomic.Uint64
	gets, getCorrupt, removed, recovered, recoveryAbort, orphanBytes, evicted, readIndexFailed atomic.Uint64
}

func (c *counters) count(r kvoffload.KeyResult) {
	switch r.Outcome {
	case kvoffload.Stored:
		c.stored.Add(1)
	case kvoffload.AlreadyStored:
		c.already.Add(1)
	case kvoffload.Conflict:
		c.conflicts.Add(1)
	case kvoffload.Rejected:
		c.rejected.Add(1)
	case kvoffload.Failed:
		c.failed.Add(1)
	}
	if r.Joined {
		c.joined.Add(1)
	}
}

// Stats returns a snapshot of the counters.
func (c *Coordinator) Stats() Stats {
	s := &c.stats
	return Stats{
		Txns: s.txns.Load(), Stored: s.stored.Load(), AlreadyStored: s.already.Load(),
		Joined: s.joined.Load(), Conflicts: s.conflicts.Load(), Rejected: s.rejected.Load(),
		Failed: s.failed.Load(), Waits: s.waits.Load(), Aborts: s.aborts.Load(),
		Gets: s.gets.Load(), GetCorrupt: s.getCorrupt.Load(), Removed: s.removed.Load(),
		Recovered: s.recovered.Load(), RecoveryAbort: s.recoveryAbort.Load(),
		OrphanBytes: s.orphanBytes.Load(), Evicted: s.evicted.Load(), ReadIndexFailed: s.readIndexFailed.Load(),
	}
}
