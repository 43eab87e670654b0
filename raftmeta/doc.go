// Package raftmeta runs hashicorp/raft around an fsm.FSM: the stores
// (raft-boltdb/v2 as log and stable store, one fsynced bolt file), the file
// snapshot store, the transport (TCP, or in-memory for an embedded node and
// tests), bootstrap, and Propose/Barrier with raft's errors translated into
// our sentinels.
//
// # Layout of Config.Dir
//
//	raft.db      raft log, current term and vote (bbolt; every write fsynced)
//	snapshots/   FileSnapshotStore: <term>-<index>-<ms>/{meta.json,state.bin},
//	             CRC-checked, written to .tmp, fsynced and renamed
//
// A caller may supply the log, stable and snapshot stores and the transport instead
// (Config.Stores): the crash simulator runs a cluster in one process so, on stores that
// survive its simulated power losses and a transport over its simulated network. Their
// write errors are log faults as raft.db's are.
//
// # Invariants and delivery
//
//   - A Result from Propose means the command is committed and applied on
//     this node. ErrNotLeader and ErrInvalidCommand mean it was not appended.
//     ErrIndeterminate means it may still commit: the caller retries with the
//     same TxnID (the FSM de-duplicates by TxnID) or reads fsm.TxnResult
//     after a Barrier.
//   - After Open the FSM holds the newest snapshot; committed entries after
//     it are re-applied only once this node learns the commit index (as
//     leader, after its first entry of the term commits). Callers that read
//     the FSM at start-up (recovery) must WaitLeader and then Barrier first.
//   - Propose checks the command with fsm.Decode before proposing it, because
//     fsm.ApplyCommand panics on an undecodable command on every replica.
//
// # Membership
//
// One node bootstraps a new cluster (Config.Bootstrap); the leader adds the
// others with AddMember (voters up to MaxVoters, non-voters beyond) and
// removes them with RemoveMember (promoting a non-voter when a voter goes).
// Both are leader-only, idempotent and serialized per node, and carry the
// configuration index they read, so concurrent changes cannot overshoot
// MaxVoters. OnLeader hooks run on every gain of leadership (the node
// proposes its own fsm member record there); TransferLeadership hands
// leadership away before a leader shuts down.
//
// Leader forwarding is not here: Propose on a follower fails with
// ErrNotLeader naming the leader (Leader reports it too).
//
// # Concurrency
//
// All Node methods are safe for concurrent use. Close may run concurrently
// with Propose; proposals then fail with ErrClosed (not sent) or
// ErrIndeterminate (sent).
//
// # Logging
//
// raft logs through hclog; an adapter routes it into Config.Logger (slog) at
// the matching level with component=raft. nil discards everything.
package raftmeta
