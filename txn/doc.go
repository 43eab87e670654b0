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
// A Coordinator is safe for concurrent use. Its state is split by job, each part a type with
// its own lock; these seven are every mutex in the package (docs/architecture.md links here;
// internal/lint's TestTxnLocksListed holds this list to the code):
//
//	flightTable.mu        (coordinator.go) the in-flight table: the keys being written and the
//	                      calls running by txn ID. With the FSM it decides, atomically, whether
//	                      a key is committed, in flight, or free: BatchOffload holds it from the
//	                      txn ID check through lookUp and plan; finish, batchExists and
//	                      RemoveTxn take it briefly
//	intentTable.truncMu   (intenttable.go, an RWMutex) WAL truncation against the intent
//	                      appends in progress: appenders share it from Append until the intent
//	                      is registered, maybeTruncate holds it alone
//	intentTable.mu        (intenttable.go) the unresolved intents, by WAL index
//	evictor.mu            (evict.go) one eviction at a time: held across the eviction's REMOVE
//	                      proposal and its wait for the reclaimer (flush)
//	lru.mu                (lru.go) the LRU of this node's keys and the leases on them
//	reclaimer.mu          (reclaim.go, with its sync.Cond) pins, doomed and deferred extents,
//	                      the reclaimer's queue and its progress
//	readLocal's mu        (read.go, a local of one call) the keys that call's reads found
//	                      corrupt, appended to from the read completions
//
// Lock order. A -> B means B may be taken while A is held, never A while B is held; two
// locks with no path between them are never held together:
//
//	flightTable.mu -> the FSM's read lock (Meta.Lookup, Generation, TxnResult)
//	intentTable.truncMu -> the WAL (Append, TruncateFront: its locks and its I/O) -> intentTable.mu
//	evictor.mu -> lru.mu
//	evictor.mu -> a Raft proposal (Meta.Propose) and reclaimer.mu (flush)
//	intentTable.mu, lru.mu, reclaimer.mu, readLocal's mu: leaves. No other lock is taken, no
//	bucket, WAL or Raft call is made and nothing is awaited under them (reclaimer.flush waits
//	on the sync.Cond, which releases reclaimer.mu)
//
// No goroutine holds two of flightTable.mu, intentTable.truncMu and evictor.mu at once; none
// of them is held by a Raft goroutine. flightTable.mu guards only memory: no I/O, Raft call or
// wait happens under it. evictor.mu is the one lock held across a Raft proposal and a wait:
// what that waits on (Raft's apply goroutine, whose FSM hooks take lru.mu and reclaimer.mu;
// the reclaimer's goroutine; the background resolver, which takes lru.mu to spare victims)
// never takes it. An in-flight slot (Coordinator.sem, a channel) is waited for with none of
// these locks held and kept across a whole write, which takes truncMu, evictor.mu and
// flightTable.mu (finish) in turn, one at a time.
//
// The FSM hooks (OnApplied, OnRestored; hooks.go) run on Raft's apply goroutine after the FSM
// has released its lock, and take only the two leaves lru.mu and reclaimer.mu, briefly: the
// LRU is updated there, in step with the metadata, so a read or an eviction right after a
// proposal returns sees it; the bytes of removed entries are queued to the reclaimer, whose
// goroutine frees them. Readers pin the extents they read; an extent whose key was removed is
// freed only when its removal has been applied and its pins drain. Remove and eviction wait
// for the reclaimer to catch up (reclaimer.flush) before they return, so the bytes they
// removed are free (unless pinned) when they do.
package txn
