package txn

import "errors"

var (
	// ErrBatchTooLarge is returned when a request exceeds Limits.MaxBatchKeys or MaxBatchBytes.
	ErrBatchTooLarge = errors.New("txn: batch too large")
	// ErrFailed is returned after a fail-stop error (the WAL could not be written or synced):
	// the coordinator accepts nothing more; restart the process to recover.
	ErrFailed = errors.New("txn: coordinator failed")
	// ErrTxnIDInUse is returned when a call reuses the txn ID of a running or finished call
	// for a different batch: other keys, sizes or bytes (xxhash64). A retry must send the same
	// objects; nothing of the refused call was stored.
	ErrTxnIDInUse = errors.New("txn: txn ID already used for a different batch")
	// ErrIndeterminate is returned when a batch's COMMIT could not be confirmed within
	// CommitTimeout (no leader, or the leader died with it in flight). It may still commit:
	// retry with the same txn ID, on any node, to learn the outcome exactly once.
	ErrIndeterminate = errors.New("txn: commit outcome unknown; retry with the same txn ID")
	// ErrRefused is what a Meta returns (wrapped) when the leader definitely refused a
	// command: this node is outside the cluster configuration (removed while running). The
	// coordinator stops proposing at once instead of retrying until CommitTimeout; the batch
	// still ends ErrIndeterminate (an earlier attempt may have committed), so the caller
	// retries on another member with the same txn ID.
	ErrRefused = errors.New("txn: refused by the leader")
	// ErrRemoved is returned by every call of a coordinator whose node was removed from the
	// cluster while it ran (MarkRemoved: the leader refused it as outside the configuration).
	// Nothing was done; the caller goes to another member. The node should be stopped: a
	// restart with its data directory refuses to start.
	ErrRemoved = errors.New("txn: this node was removed from the cluster")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("txn: coordinator closed")
)
