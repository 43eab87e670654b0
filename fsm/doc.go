// Package fsm is kvoffload's replicated metadata: for every key, where its
// bytes are (owner node, bucket, extent), how to verify them (size,
// xxhash64), and which generation and transaction produced them; and the
// member directory (every node's raft, API and peer addresses).
//
// The package is pure: no I/O, no goroutines, no clock, no randomness and no
// raft import. raftmeta adapts it to raft.FSM; tests drive it directly.
//
// # Commands
//
// Six commands travel through the raft log, each encoded as a type byte, a
// version byte and a binary body (codec.go documents the layout; it is wire
// format). Every command carries a TxnID:
//
//   - Commit makes entries live. Per entry, in order: key live with the same
//     Sum and Size -> AlreadyStored; live with a different Sum or Size ->
//     Conflict; not live and Gen <= the key's last generation -> Stale; an
//     extent out of every record's bounds or overlapping a live extent of the
//     same owner and bucket -> Invalid (extent.go); else Stored (Owner and
//     TxnID come from the command).
//   - Abort records that the txn ended without committing anything.
//   - Remove deletes live keys (Gen 0 = any version, else only that
//     generation) and burns a generation for keys that are not live, so an
//     in-flight commit that read the old generation becomes Stale.
//   - SetMember records a Member under its NodeID (replacing the old record)
//     or, with Remove, deletes it. Its Result has Type CmdMember and no Keys.
//     The member directory is metadata only: raft's own configuration (who
//     votes) is managed by raftmeta, not here.
//   - Prune drops the recorded Results of txns applied below a raft index
//     (types.go), so the txn-result table stays bounded.
//   - SetCluster (CmdCluster) records the cluster's ID once; another ID is
//     refused (Aborted) and changes nothing.
//
// # Invariants
//
//   - Determinism: the same command sequence yields byte-identical state
//     (Hash) on every replica. Nothing depends on map order, time or the node.
//   - Exactly-once effect: a command whose TxnID already has a recorded Result
//     changes nothing and returns that Result. raft re-applies every entry
//     after the last snapshot at each restart, and clients retry indeterminate
//     proposals; both are no-ops here. The first command of a TxnID wins: a
//     Commit after an Abort of the same TxnID returns the Abort's Result, and
//     vice versa.
//   - Generations only grow: a key's generation (Generation) never decreases,
//     and a live entry's Gen is its generation (held once, in the entry; the
//     gens table holds the keys that are not live). A removed key therefore
//     never comes back from an older write.
//   - Derived counters (Stats.Bytes and the per-owner Owners counters) equal
//     a recount of the live entries; they are maintained on apply and rebuilt
//     on Restore, never encoded.
//   - AppliedIndex is the maximum raft index seen; a re-applied index is
//     handled by the TxnID de-duplication.
//   - An undecodable or unknown command panics in ApplyCommand: applying it
//     differently on different replicas would be worse. Decode never panics;
//     proposers validate with it first.
//
// # Unbounded growth (known limitation)
//
// The generation table (one entry per key ever written or removed) grows
// without bound: it must be kept for as long as an in-flight commit of an
// older generation may still arrive. The txn-result table is bounded by Prune,
// which node proposes through raft (so every replica prunes at the same log
// index); a retry of a pruned txn is treated as a new one.
//
// # Concurrency
//
// All FSM methods are safe for concurrent use (one RWMutex). ApplyCommand and
// Restore take the write lock; the rest take the read lock. Snapshot copies
// the maps under the read lock, so Snapshot.WriteTo may run concurrently with
// ApplyCommand, as raft's FSMSnapshot.Persist does. Results handed out are
// copies; recorded Results are never mutated.
package fsm
