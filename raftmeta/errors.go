package raftmeta

import "errors"

// Sentinels. Errors returned by this package wrap one of these (or a raft or
// store error, wrapped with %w).
var (
	// ErrNotLeader: this node is not the leader, so the command was not
	// appended (a definite failure: retry on the leader).
	ErrNotLeader = errors.New("raftmeta: not the leader")
	// ErrIndeterminate: the command may or may not commit (leadership lost,
	// timeout, shutdown or cancellation after it was handed to raft). Retry
	// with the same TxnID, or read the FSM's TxnResult after a Barrier.
	ErrIndeterminate = errors.New("raftmeta: outcome indeterminate")
	// ErrClosed: the node is closed.
	ErrClosed = errors.New("raftmeta: closed")
	// ErrInvalidCommand: the command does not decode, so it was not proposed
	// (applying it would panic every replica).
	ErrInvalidCommand = errors.New("raftmeta: invalid command")
	// ErrInvalidConfig: Config.Validate found a problem.
	ErrInvalidConfig = errors.New("raftmeta: invalid config")
	// ErrLogWrite: raft.db (the Raft log and its term and vote) could not be written, so this
	// member can neither append nor vote: it stops Raft (Node.LogFault).
	ErrLogWrite = errors.New("raftmeta: the Raft log (raft.db) cannot be written")
	// ErrInvalidMember: AddMember or RemoveMember got an empty ID or address.
	ErrInvalidMember = errors.New("raftmeta: invalid member")
)
