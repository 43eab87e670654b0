// Package failpoint marks named points in the write path where the chaos suite injects faults.
//
// In normal builds Hit is inlined to one atomic load that returns nil while nothing is armed,
// and only EnableFunc arms a point: that is how unit tests fail or hold a step without the
// chaos tag (wal's tests fail its I/O steps WALWriteBatch, WALSyncDir and WALTruncateFront
// this way). Built with -tags chaos, Hit also consults the KVOFFLOAD_FAILPOINTS environment
// variable (read once) and anything armed with Enable:
//
//	KVOFFLOAD_FAILPOINTS="txn.data.synced=crash@3,txn.meta.committed=sleep(200)"
//
// Actions: crash (SIGKILL of this process: no deferred Close or fsync runs, unlike a panic),
// sleep(ms), error (Hit returns ErrInjected), torn (Hit returns ErrTorn: a write site that
// supports it writes part of its data and then calls Crash). A suffix @N fires only on the N-th hit of that
// point (1-based); without it the action fires on every hit. Every hit is counted, so a run
// can print its failpoint coverage: Hits counts since the last Reset (what @N refers to),
// Coverage and Totals count over the whole process, across Resets.
package failpoint

import "errors"

// ErrInjected is returned by Hit for the error action.
var ErrInjected = errors.New("failpoint: injected error")

// ErrTorn is returned by Hit for the torn action: the caller writes a prefix of its data and
// then calls Crash, leaving a torn write on disk.
var ErrTorn = errors.New("failpoint: torn write")

// Names of the write path's failpoints, in step order (docs/design.md, "The write path").
const (
	OffloadValidated = "txn.validated"      // S0: validated, extents reserved, nothing durable
	IntentLogged     = "txn.intent.logged"  // S1: INTENT durable in the WAL
	DataWritten      = "txn.data.written"   // S2: records written to the bucket, not yet synced
	DataSynced       = "txn.data.synced"    // S3: records fdatasync'd
	MetaCommitted    = "txn.meta.committed" // S4: COMMIT applied through Raft
	DoneLogged       = "txn.done.logged"    // S5: DONE queued in the WAL
	Acked            = "txn.acked"          // S6: results about to be returned
	RecoveryScanned  = "recovery.scanned"   // recovery: the WAL scanned for unresolved intents
	RecoveryResolved = "recovery.resolved"  // recovery: one unresolved intent resolved
	RecoveryGC       = "recovery.collected" // recovery: one bucket's orphans collected

	WALTruncateBefore = "wal.truncate.before"   // resolved WAL history about to be dropped (TruncateFront)
	WALTruncateAfter  = "wal.truncate.after"    // TruncateFront returned
	SnapshotPersist   = "raft.snapshot.persist" // a Raft snapshot of the FSM about to be written
	BucketWrite       = "bucket.write"          // one record about to be written (supports torn)

	WALWriteBatch    = "wal.io.write"    // wal: one group commit's batch about to be written and fsync'd
	WALSyncDir       = "wal.io.syncdir"  // wal: a directory fsync about to run (new log, rotation, truncation)
	WALTruncateFront = "wal.io.truncate" // wal: Log.TruncateFront about to drop the entries before its index

	EvictChosen  = "evict.chosen"  // eviction: victims chosen, their REMOVE not yet proposed
	BucketFree   = "bucket.free"   // an extent released in accounting, its hole not yet punched or empty bucket not yet removed
	EvictRemoved = "evict.removed" // eviction: its REMOVE applied and its victims' bytes freed (or left to their readers)
)

// WritePath lists the write path's failpoints S0..S6 in order.
var WritePath = []string{OffloadValidated, IntentLogged, DataWritten, DataSynced, MetaCommitted, DoneLogged, Acked}

// EvictPath lists the eviction's failpoints in the order one eviction hits them.
var EvictPath = []string{EvictChosen, BucketFree, EvictRemoved}

// WALIO lists the wal package's own I/O steps. An error from Hit there (error, or torn, which
// the wal treats as an error) fail-stops the Log as the I/O error would (wal/doc.go).
var WALIO = []string{WALWriteBatch, WALSyncDir, WALTruncateFront}

// All lists every failpoint. The chaos suite fails a full run in which one of them was hit
// fewer than three times in process (chaos/main_test.go), so a new failpoint must be added
// here and reached by an in-process tier.
var All = append(append(append(append([]string(nil), WritePath...), EvictPath...), WALIO...),
	RecoveryScanned, RecoveryResolved, RecoveryGC, WALTruncateBefore, WALTruncateAfter, SnapshotPersist,
	BucketWrite)
