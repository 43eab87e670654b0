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
// A Coordinator is safe for concurrent use. Its state is split by job, each part with its
// own lock:
//
//	flightTable.mu        the in-flight table (flights, running): with the FSM it decides,
//	                      atomically, whether a key is committed, in flight, or free
//	intentTable.truncMu   WAL truncation against intent appends in progress (shared by appenders)
//	intentTable.mu        the unresolved intents, by WAL index
//	evictor.mu            one eviction at a time, held across its REMOVE proposal
//	lru.mu                the LRU of this node's keys and the leases on them
//	reclaimer.mu          pins, doomed and deferred extents, the reclaimer's queue
//
// Lock order (A -> B: B may be taken while A is held, never A while B is held):
//
//	flightTable.mu -> the FSM's read lock (Meta.Lookup, Generation, TxnResult)
//	intentTable.truncMu -> the WAL (Append, TruncateFront) -> intentTable.mu
//	evictor.mu -> lru.mu
//	lru.mu, reclaimer.mu: leaves; nothing is taken, no I/O is done and nothing is awaited
//	under them (reclaimer.flush waits on a sync.Cond, which releases reclaimer.mu)
//
// evictor.mu is also held while the eviction's REMOVE is proposed and while it waits for the
// reclaimer (flush): the FSM hooks and the reclaimer's goroutine, which that waits on, never
// take it, nor flightTable.mu or the intent table's locks.
//
// The FSM hooks (OnApplied, OnRestored) run on Raft's apply goroutine and take only the two
// leaves, briefly: the LRU is updated there, in step with the metadata, so a read or an
// eviction right after a proposal returns sees it; the bytes of removed entries are queued
// to the reclaimer, whose goroutine frees them. Readers pin the extents they read; an extent
// whose key was removed is freed only when its removal has been applied and its pins drain.
// Remove and eviction wait for the reclaimer to catch up (reclaimer.flush) before they
// return, so the bytes they removed are free (unless pinned) when they do.
package txn
