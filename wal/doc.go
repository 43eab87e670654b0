// Package wal is kvoffload's intent log: a durable, append-only sequence of
// Records (INTENT and DONE marks of offload transactions) kept on top of
// github.com/tidwall/wal, which it hardens.
//
// tidwall/wal stores entries without checksums, refuses to open a log with a
// torn last entry, parses appended zero bytes as empty entries, fsyncs on every
// write, never fsyncs its directory, and is left in an undefined state by a
// failed write. This package wraps every entry in a checksummed envelope,
// verifies and repairs the log before tidwall opens it, group-commits
// concurrent appends into one fsync, fsyncs the directory where tidwall does
// not, and fail-stops on the first I/O error.
//
// tidwall/wal v1.2.1 is built from third_party/tidwall/wal, whose one patch
// puts its file I/O behind an FS option. Every file operation of the log goes
// through Config.FS (vfs.OSFS by default; disk.go): the same seam, and the
// same durability contract, as the bucket store's, so tests can crash the log
// at each of its persistence points on vfs/memfs (TestCrashAtEveryPersistencePoint,
// and chaos/sim).
//
// # Invariants
//
//   - Indexes are consecutive, start at 1, and never change meaning: an index
//     returned by Append names the same record until TruncateFront drops it.
//   - Every entry in the log is a valid envelope. Open verifies all of them.
//   - Append returns only after its records, and every record queued before
//     them, are fsynced (file, and directory when a segment was created).
//   - After an I/O error the Log performs no further write or fsync: the
//     failing call and every later call return an error wrapping ErrFailed.
//   - Open never cuts a valid entry: it truncates only a damaged tail that no
//     valid entry follows, and refuses (*CorruptError) anything else.
//
// # Concurrency contract
//
// All methods are safe for concurrent use. Append, AppendAsync and Sync queue
// requests for a single committer goroutine, which takes every queued request
// (up to Config.MaxBatchRecords records, in queue order) and writes them with
// one tidwall WriteBatch, that is one fsync. Indexes are assigned in queue
// order when a call is queued. AppendAsync records do not trigger a commit on
// their own (unless MaxBatchRecords of them are queued); they ride on the next
// Append, Sync or Close. Replay must not run concurrently with TruncateFront.
// FirstIndex and LastIndex describe durable entries only.
//
// # Entry format
//
// Each tidwall entry holds one envelope. All integers are little endian. The
// constants below, and the numbering of RecordType, are on-disk format: any
// change needs a new version byte and a migration.
//
//	offset  size  field       meaning
//	0       4     magic       "KVW1" (0x4b 0x56 0x57 0x31)
//	4       1     version     1
//	5       1     type        1 = RecordIntent, 2 = RecordDone, 3 = RecordDataFailed
//	6       16    txnID       transaction ID, opaque bytes
//	22      4     payloadLen  uint32, number of payload bytes (n)
//	26      n     payload     opaque to this package
//	26+n    8     checksum    xxhash64 (cespare/xxhash/v2) of bytes [0, 26+n)
//
// An envelope is 34+n bytes. It is invalid if it is shorter than 34 bytes, if
// magic, version or type is unknown, if payloadLen disagrees with the entry
// size, or if the checksum does not match. TestEnvelopeGolden holds the bytes
// to testdata/envelope.golden; decoding never panics (FuzzDecode, FuzzScan).
// The INTENT payload is txn's (txn/intent.go).
//
// Around the envelope, tidwall's binary segment format applies: a segment file
// is named by the 20-digit decimal index of its first entry (for example
// 00000000000000000001) and is a plain concatenation of entries, each
// uvarint(len(envelope)) || envelope. tidwall's TruncateFront writes a copy of
// the kept part to <index>.START (via a .TEMP file, fsynced, renamed) and
// removes the older segments before renaming it into place; tidwall.Open
// finishes such an interrupted truncation.
//
// # Open: verification and tail repair
//
// Open first lets tidwall finish an interrupted truncation, if any. It then
// reads every segment file and walks its entries, checking framing and
// envelope:
//
//   - Damage in a segment other than the last, or segments whose indexes do
//     not follow on, is a *CorruptError.
//   - In the last segment, damage that a valid envelope follows (a flipped bit
//     in the middle, a damaged length prefix) is a *CorruptError naming the
//     file and the byte offset of the damaged entry. Nothing is changed.
//   - Damage that no valid envelope follows is a torn tail (a cut entry,
//     zeros, garbage): Open truncates the file after the last valid entry,
//     fsyncs it, removes the file if it is now empty and not the only segment,
//     fsyncs the directory, logs at Warn and describes it in RepairReport.
//
// A bit flip inside the very last entry cannot be told from a torn write, so
// that entry is dropped as a torn tail (and reported).
//
// # Crash safety
//
// What is fsynced, in order, and what a crash at each moment leaves:
//
//   - Append / group commit: (1) tidwall writes the batch with one write per
//     segment touched and fsyncs the segment file (fsyncing a full segment
//     before creating the next); (2) if a new segment may have been created,
//     the directory is fsynced; (3) the waiters are woken. A crash before (1)
//     completes leaves a prefix of the batch, possibly followed by zeros or
//     garbage: Open cuts the torn part, and none of it was acknowledged. A
//     crash between (1) and (2) may lose a new segment file, that is a suffix
//     of the batch, also unacknowledged.
//   - AppendAsync: nothing is fsynced until the next group commit; a crash
//     loses the queued records (the caller must tolerate that; DONE marks are
//     re-derived by recovery).
//   - TruncateFront: tidwall fsyncs the .START copy, removes the older
//     segments, renames the copy into place; then the directory is fsynced.
//     A crash before the directory fsync may undo the truncation (the dropped
//     entries reappear) or leave a .START file that the next Open completes;
//     it never leaves a hole.
//   - Open: a repair truncates and fsyncs the file, then fsyncs the
//     directory; repeating it after a crash gives the same result. Creating
//     the log directory fsyncs its parent, and creating the first segment
//     fsyncs the directory.
//
// Assumptions: fsync of a file makes its data and size durable; fsync of a
// directory makes its entries durable; directory operations become durable in
// the order they were made (true of journaling file systems such as ext4 and
// XFS), so a later segment never survives without an earlier one.
//
// # Failure
//
// A failed write or fsync is never retried (the kernel may already have
// dropped the dirty pages; see "fsyncgate"), and tidwall's in-memory state is
// wrong after a failed write. The Log therefore fail-stops; the process
// should exit and recover from what is on disk.
//
// The I/O steps are failpoints (internal/failpoint): WALWriteBatch before a
// batch is written, WALSyncDir before a directory fsync, WALTruncateFront
// before tidwall's truncation. An error from one is treated as that step's
// I/O error; the unit tests arm them with failpoint.EnableFunc, the chaos
// suite also through KVOFFLOAD_FAILPOINTS.
package wal
