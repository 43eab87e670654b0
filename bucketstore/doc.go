// Package bucketstore stores KV-cache blocks as self-describing records appended to large
// bucket files. The key -> extent metadata lives elsewhere (the Raft FSM); this package only
// allocates extents, writes and syncs records, verifies them on read, frees them and
// garbage-collects what the metadata no longer references. Linux only (O_DIRECT, fdatasync,
// fallocate, flock).
//
// # Protocol
//
// A writer calls Reserve(RecordSize(len(key), len(payload))), WriteRecord, then Sync of the
// extent's bucket; only after Sync returns nil may it commit metadata pointing at the extent.
// Readers call Read with the header the metadata promises; every field is checked.
//
// # Invariants
//
//   - Every record starts at a multiple of Alignment and is padded to one (zero padding).
//   - A bucket file is written only by the Store that created it: Open lists existing files
//     and new records always go to a fresh file with a larger ID, so a torn tail left by a
//     crash is never appended to.
//   - LiveBytes equals the sum of extents reserved or adopted and not yet freed (exact:
//     each bucket keeps its live extents, so a double Free or Adopt is an error, never a
//     silent miscount). Capacity bounds LiveBytes at Reserve.
//   - After Collect of a sealed bucket, its allocated bytes equal the sum of its live extents.
//   - A bucket whose fdatasync failed is never synced again nor reserved in (fsyncgate: a
//     retried fsync can succeed without the data being on disk).
//
// Built with -tags invariants (internal/invariants; the race tests of scripts/test.sh), the
// store asserts the accounting as it changes: the extents of a fresh bucket are handed out in
// offset order below its tail, so no two overlap; no byte counter goes negative; a bucket
// file is removed only when nothing in it is live; Close recounts LiveBytes from the extents.
//
// # Concurrency
//
// All Store methods are safe for concurrent use. WriteRecord and Read of different extents
// proceed in parallel (positional I/O outside the store mutex). Sync is group-committed per
// bucket: a caller is covered by the first fdatasync round that starts after it arrives;
// callers arriving while a round runs share the next one. Collect must not race Free or Adopt
// on the same bucket, and Scan expects a quiescent store; both are recovery/tool operations.
//
// # Record format
//
// These constants are on-disk format: changing any of them needs a new version byte.
// Integers are little endian.
//
//	offset  size  field
//	0       4     magic "KVB1"
//	4       1     version = 1
//	5       1     flags = 0
//	6       2     keyLen (<= MaxKeyLen = 1024)
//	8       4     payloadLen
//	12      4     reserved = 0
//	16      16    txnID
//	32      8     generation
//	40      8     payloadSum = xxhash64(payload)
//	48      8     headerSum  = xxhash64(bytes 0..48 || key)
//	56      n     key, then payload, then zero padding to a multiple of 4096
//
// A record's length is RecordSize: 56 + keyLen + payloadLen rounded up to 4096, at most
// MaxRecordLen (1 GiB + 4 KiB). The identity fields (key, txnID, generation) make a
// misdirected or stale block detectable, not only a flipped bit. TestRecordGolden holds the
// bytes to testdata/record.golden; DecodeRecord never panics (FuzzDecodeRecord).
//
// Bucket files are named bucket-%010d.kvb (IDs from 1); Dir/LOCK is held with flock.
//
// # Crash safety
//
//   - WriteRecord: the record bytes are in the page cache (or, with O_DIRECT, in the device
//     cache). A crash may lose or tear them. No metadata points at them yet, so recovery sees
//     orphan garbage, which Collect punches out.
//   - Sync: fdatasync of each bucket file, then (if a bucket file was created or removed since
//     the last time) fsync of Dir. Only after both succeed are the records and the names of
//     their files durable, so metadata committed afterwards never points at lost bytes.
//   - Crash after Sync, before the metadata commit: the record is durable but unreferenced;
//     Collect reclaims it.
//   - Free/Collect: punch, truncate and remove are not synced. If a crash undoes them, the
//     bytes come back as unreferenced garbage and a later Collect (idempotent) frees them
//     again. Removing a file is done only when nothing in it is live, so a resurrected file
//     holds only garbage.
//   - Read verifies magic, version, header checksum, lengths, payload checksum, padding and
//     every field the metadata expects, so a torn, stale or misdirected block is reported as
//     ErrCorrupt, never returned as data.
//
// # Filesystem seam
//
// The store does all I/O through vfs.FS (Config.FS): vfs.OSFS (real, O_DIRECT) in
// production; its tests also run on memfs.FS (vfs/memfs: in-memory, crashable: Crash keeps
// durable state plus a seeded choice of pending operations) and errorfs.FS (vfs/errorfs:
// wraps another FS and injects errors chosen by an Injector, e.g. FailNth). A record's
// Alignment is a multiple of vfs.DirectIOAlignment, so records are written with direct I/O.
//
// # Logging
//
// Config.Logger gets Info for open and collect, Debug for bucket roll and removal, Error for
// sync failures. A nil Logger discards.
package bucketstore
