// Package txn is the transaction coordinator of kvoffload: one batch offload is one
// transaction, and this package runs its steps, resolves it exactly once, and recovers the
// unresolved ones after a crash.
//
// # Write path (docs/design.md, "The write path")
//
//	S0 validate; collapse duplicate keys; committed keys -> AlreadyStored; keys in flight in
//	   another transaction -> join it (single-flight); reserve extents for the rest
//	S1 WAL: INTENT{txn ID, key -> extent, size, xxhash64, generation}; durable (group commit)
//	S2 write the records into the open bucket
//	S3 fdatasync the bucket (group commit; plus a directory fsync when a file was created)
//	S4 propose COMMIT through Raft and wait until it is applied
//	S5 WAL: DONE (queued, no fsync of its own: recovery can ask the FSM)
//	S6 return one result per key
//
// A failure in S2/S3 proposes ABORT; the extents are freed only after the ABORT is applied.
// An indeterminate S4 (Raft timed out or lost leadership) is resolved in the background: after
// a Barrier the FSM either has the COMMIT, or an ABORT is proposed, and the FSM keeps whichever
// came first (it de-duplicates by txn ID).
//
// # Crash safety
//
// A crash before S1 leaves nothing durable but garbage bytes in a bucket (collected at start-up).
// A crash between S1 and S4 leaves an unresolved intent: recovery rolls it forward if every
// record verifies (key, txn ID, generation, length, xxhash64), otherwise it proposes ABORT.
// A crash after S4 leaves an intent whose outcome the FSM already knows. In every case no
// metadata record exists whose bytes were not fdatasync'd first (G1), and every key ends
// Stored, AlreadyStored, Conflict, Rejected or Failed (G5).
//
// # Concurrency
//
// A Coordinator is safe for concurrent use. One mutex guards the in-flight key table, which
// together with the FSM decides, atomically, whether a key is committed, in flight, or free.
// Readers pin the extents they read; an extent whose key was removed is freed only when its
// pins drain.
package txn
