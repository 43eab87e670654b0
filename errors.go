package kvoffload

import "errors"

// The errors of a whole call. Every Store method returns nil or an error wrapping one of
// these (and, when the caller's context ended, the context's error as well, so
// errors.Is(err, context.DeadlineExceeded) holds too). docs/api.md has the retry table.
var (
	// ErrIndeterminate: BatchOffload could not learn the batch's outcome before its context
	// ended (or its attempts ran out): the batch may or may not have been stored. Retry with
	// the SAME TxnID (on any member) to learn it; the store applies the batch at most once.
	ErrIndeterminate = errors.New("kvoffload: outcome unknown; retry with the same txn ID")
	// ErrUnavailable: the call could not be served before its context ended or its attempts
	// ran out (no member reachable, no leader, the store closing). Nothing was changed by a
	// read; a Remove may have removed some keys (it is idempotent: retry it).
	ErrUnavailable = errors.New("kvoffload: unavailable")
	// ErrInvalidArgument: the request is malformed as a whole (a zero TxnID, a txn ID reused
	// for a different batch, a mismatched buffer count). Never retried; fix the request.
	ErrInvalidArgument = errors.New("kvoffload: invalid request")
	// ErrTooLarge: the request is over a limit of the whole call (MaxBatchKeys,
	// MaxBatchBytes; the error names the limit and its value). Split the batch.
	ErrTooLarge = errors.New("kvoffload: request too large")
	// ErrDenied: the store refused the caller's credentials (a missing or wrong token, or a
	// certificate it does not accept). Never retried.
	ErrDenied = errors.New("kvoffload: request denied")
	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("kvoffload: closed")
	// ErrProtocol: a member's reply violated the wire protocol (wrong number of results,
	// chunks out of order). The call's effect is unknown like ErrIndeterminate's for an
	// offload; report it.
	ErrProtocol = errors.New("kvoffload: protocol violation")
)
