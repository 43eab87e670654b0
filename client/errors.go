package client

import "errors"

var (
	// ErrNoAddress is returned by Dial when no address was given.
	ErrNoAddress = errors.New("client: no address")
	// ErrUnreachable is returned by Dial when no address could be connected to.
	ErrUnreachable = errors.New("client: no member reachable")
	// ErrClosed is returned by calls on a closed Client.
	ErrClosed = errors.New("client: closed")
	// ErrTxnDone is returned by Put and Commit after Commit or Abort.
	ErrTxnDone = errors.New("client: transaction already committed or aborted")
	// ErrIndeterminate is wrapped into the error of a BatchOffload whose context ended while
	// its outcome was unknown: the batch may or may not have been stored. Retrying with the
	// same TxnID resolves it.
	ErrIndeterminate = errors.New("client: outcome unknown")
	// ErrInvalidArgument wraps a request the cluster refused as malformed (gRPC
	// InvalidArgument, or FailedPrecondition other than "not the leader", such as a reused
	// txn ID), or one gRPC could not encode. Such a request is never retried.
	ErrInvalidArgument = errors.New("client: invalid request")
	// ErrTooLarge wraps a request over a cluster limit (gRPC ResourceExhausted: batch too
	// large). It is never retried.
	ErrTooLarge = errors.New("client: request too large")
	// ErrDenied wraps a request the cluster refused for its credentials (gRPC Unauthenticated
	// or PermissionDenied: see Options.TLS and Options.Token). It is never retried.
	ErrDenied = errors.New("client: request denied")
	// ErrProtocol is returned when a member's reply violates the wire protocol (wrong number
	// of results, chunks out of order).
	ErrProtocol = errors.New("client: protocol violation")
)
