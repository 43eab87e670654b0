package txn

import "errors"

var (
	// ErrBatchTooLarge is returned when a request exceeds Limits.MaxBatchKeys or MaxBatchBytes.
	ErrBatchTooLarge = errors.New("txn: batch too large")
	// ErrFailed is returned after a fail-stop error (the WAL could not be written or synced):
	// the coordinator accepts nothing more; restart the process to recover.
	ErrFailed = errors.New("txn: coordinator failed")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("txn: coordinator closed")
)
