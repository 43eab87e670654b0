package kvoffload

import (
	"context"
	"time"
)

// Store is a kvoffload store: an embedded node (node.Node), a remote cluster (client.Client)
// or an in-memory fake (fake.Store). All three pass the same conformance suite (storetest).
//
// Per-key problems are results, not errors: an error means the call could not answer for its
// keys at all. Every error wraps one of ErrIndeterminate, ErrUnavailable, ErrInvalidArgument,
// ErrTooLarge, ErrDenied, ErrClosed or ErrProtocol, and the context's error when the context
// ended; a call whose context had ended before it began does nothing and returns
// ErrUnavailable. MaxBatchKeys counts every key a call names, those CheckKey refuses too. A
// Store is safe for concurrent use.
type Store interface {
	// BatchOffload stores objs as one transaction named id, and returns one KeyResult per
	// object, in input order. Each key is Stored, AlreadyStored, Conflict, Rejected or Failed
	// on its own: one bad key never fails the others. A zero id is ErrInvalidArgument; an id
	// already used for a different batch is ErrInvalidArgument, with nothing stored. An id is
	// recorded only by a call that stored keys: after a call that stored none (every key
	// AlreadyStored, Rejected, ...) the id is free again, and a retry simply runs again.
	// ErrIndeterminate: the outcome is unknown; call again with the same id and objs to
	// learn it (exactly once). Values must not be modified until the call returns; after it,
	// the store holds its own copy. On an error no results are returned.
	BatchOffload(ctx context.Context, id TxnID, objs []Object) ([]KeyResult, error)
	// BatchGet reads keys, verified (xxhash64 of the stored bytes), and returns one GetResult
	// per key, in request order; each Found value is a fresh slice the caller owns.
	// Errors: ErrUnavailable, ErrTooLarge (over MaxBatchKeys), ErrDenied, ErrClosed.
	BatchGet(ctx context.Context, keys []string) ([]GetResult, error)
	// BatchGetInto is BatchGet into caller-owned buffers: the value of keys[i] is copied
	// into bufs[i] and GetResult.Value is bufs[i][:Size]. A buffer shorter than its value
	// gives that key ShortBuffer (with Size, so the caller can retry with a larger one) and
	// leaves the buffer as it was. len(bufs) != len(keys) is ErrInvalidArgument. The buffers
	// must not overlap one another (a key's bytes would overwrite another's).
	BatchGetInto(ctx context.Context, keys []string, bufs [][]byte) ([]GetResult, error)
	// BatchExists reports each key's Presence and the count of leading Present keys. With
	// lease > 0 the Present keys are also pinned against eviction for lease (rounded to a
	// millisecond, at most the store's MaxLease), so a prefix found now can be read before it
	// is evicted.
	// Keys the store cannot confirm are Unknown, never Absent.
	BatchExists(ctx context.Context, keys []string, lease time.Duration) (ExistsResult, error)
	// Remove deletes keys; RemoveResult.Removed is false for a key that was not committed.
	// Remove is idempotent: after ErrUnavailable some keys may be removed; call it again.
	Remove(ctx context.Context, keys []string) ([]RemoveResult, error)
	// Stats returns the answering member's view of the store.
	Stats(ctx context.Context) (Stats, error)
}
