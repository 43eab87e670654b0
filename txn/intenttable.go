package txn

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/invariants"
	"github.com/kvoffload/kvoffload/wal"
)

// intentTable is the set of intents this process logged and has not resolved yet, by WAL
// index, and the truncation of the WAL history in front of the oldest of them.
type intentTable struct {
	// truncMu orders WAL truncation after every intent append in progress: appenders hold
	// it shared from Append until the intent is registered in unresolved.
	truncMu    sync.RWMutex
	mu         sync.Mutex
	unresolved map[uint64]fsm.TxnID // WAL index of an unresolved INTENT -> its txn ID
	// truncAfter (under truncMu): after a truncation found no room (wal.ErrNotTruncated),
	// none is tried again before this time.
	truncAfter time.Time
}

// truncRetry is how long truncation waits after one that found no room on the disk.
const truncRetry = time.Second

// append appends rec (an INTENT) durably and registers it as unresolved before truncation
// may run, returning its WAL index.
func (t *intentTable) append(log IntentLog, rec wal.Record) (uint64, error) {
	t.truncMu.RLock()
	defer t.truncMu.RUnlock()
	idx, err := log.Append(rec)
	if err != nil {
		return 0, err
	}
	t.mu.Lock()
	if invariants.Enabled {
		if prev, dup := t.unresolved[idx]; dup {
			t.mu.Unlock()
			invariants.Failf("txn: an intent is registered once, at a WAL index no other unresolved intent holds",
				"index %d: txn %s, already txn %s", idx, fsm.TxnID(rec.TxnID), prev)
		}
	}
	t.unresolved[idx] = fsm.TxnID(rec.TxnID)
	t.mu.Unlock()
	return idx, nil
}

// resolved drops the intent at WAL index idx.
func (t *intentTable) resolved(idx uint64) {
	t.mu.Lock()
	if invariants.Enabled {
		if _, ok := t.unresolved[idx]; !ok {
			t.mu.Unlock()
			invariants.Failf("txn: an intent is resolved once, after it was registered", "index %d is not unresolved", idx)
		}
	}
	delete(t.unresolved, idx)
	t.mu.Unlock()
}

// maybeTruncate drops resolved history from the front of log once every entries have
// accumulated, never past an unresolved intent. It returns TruncateFront's error; after
// wal.ErrNotTruncated (no room on the disk: the log is unchanged) it tries again only after
// truncRetry.
func (t *intentTable) maybeTruncate(log IntentLog, every uint64) error {
	if log.LastIndex()-log.FirstIndex() < every {
		return nil
	}
	t.truncMu.Lock()
	defer t.truncMu.Unlock()
	if time.Now().Before(t.truncAfter) {
		return nil
	}
	first, target := log.FirstIndex(), log.LastIndex()
	if target-first < every {
		return nil
	}
	t.mu.Lock()
	for idx := range t.unresolved {
		if invariants.Enabled && idx < first {
			t.mu.Unlock()
			invariants.Failf("txn: the WAL is never truncated past an unresolved intent", "intent at index %d, the log starts at %d", idx, first)
		}
		target = min(target, idx)
	}
	t.mu.Unlock()
	if target <= first {
		return nil
	}
	_ = failpoint.Hit(failpoint.WALTruncateBefore)
	err := log.TruncateFront(target)
	_ = failpoint.Hit(failpoint.WALTruncateAfter)
	if errors.Is(err, wal.ErrNotTruncated) {
		t.truncAfter = time.Now().Add(truncRetry)
	}
	if err != nil {
		return fmt.Errorf("wal truncate: %w", err)
	}
	return nil
}
