package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/txn"
)

// A Node is a kvoffload.Store: the embedded implementation of the one API (docs/api.md).
var _ kvoffload.Store = (*Node)(nil)

// BatchOffload stores objs as one transaction named id (kvoffload.Store). It writes the
// intent to the WAL, the records to a bucket, fdatasyncs them, and commits the metadata
// through Raft (docs/design.md, "The write path"). Errors: ErrInvalidArgument (a zero id, or
// an id used for a different batch), ErrTooLarge (MaxBatchKeys, MaxBatchBytes, keys of more
// than MaxBatchKeys x MaxKeyBytes bytes in all), ErrIndeterminate (the commit could not be
// confirmed: call again with the same id), ErrUnavailable (the node failed its WAL: restart
// it), ErrClosed.
func (n *Node) BatchOffload(ctx context.Context, id kvoffload.TxnID, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	if err := kvoffload.CheckTxnID(id); err != nil {
		return nil, err
	}
	if err := begun(ctx); err != nil {
		return nil, err
	}
	res, err := n.coord.BatchOffload(ctx, id, objs)
	if err != nil {
		return nil, apiError(err, true) // no results with an error: the Store's contract
	}
	return res, nil
}

// begun refuses a call whose context has already ended: nothing is done, so the error is
// ErrUnavailable (wrapping the context's error) for every method, an offload included, as
// on the client and the fake.
func begun(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", kvoffload.ErrUnavailable, err)
	}
	return nil
}

// BatchGet reads keys, verified (kvoffload.Store). Errors: ErrTooLarge (MaxBatchKeys,
// MaxBatchBytes), ErrUnavailable, ErrClosed.
func (n *Node) BatchGet(ctx context.Context, keys []string) ([]kvoffload.GetResult, error) {
	send, pos, err := n.readable(ctx, keys)
	if err != nil {
		return nil, err
	}
	res, err := n.coord.BatchGet(ctx, send)
	if err != nil {
		return nil, apiError(err, false)
	}
	return spreadGets(keys, res, pos), nil
}

// BatchGetInto is BatchGet into caller-owned buffers (kvoffload.Store): the verified value is
// copied into bufs[i] from a recycled read buffer as soon as it is read. Errors: those of
// BatchGet, and ErrInvalidArgument when len(bufs) != len(keys).
func (n *Node) BatchGetInto(ctx context.Context, keys []string, bufs [][]byte) ([]kvoffload.GetResult, error) {
	if len(bufs) != len(keys) {
		return nil, fmt.Errorf("%w: %d buffers for %d keys", kvoffload.ErrInvalidArgument, len(bufs), len(keys))
	}
	res := make([]kvoffload.GetResult, len(keys))
	err := n.batchGetEach(ctx, keys, nil, func(i int, r kvoffload.GetResult) bool {
		intoBuffer(&r, bufs[i])
		res[i] = r
		return false
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// batchGetEach is BatchGet handing each position's result to visit as it is known
// (txn.Coordinator.BatchGetEach: in no particular order, from several goroutines, a Found
// value borrowed until visit returns unless visit returns true; reserve, when not nil, told
// the bytes the values will hold before any is read); a key CheckKey refuses is visited
// InvalidKey. Errors: those of BatchGet and reserve's, before any visit.
func (n *Node) batchGetEach(ctx context.Context, keys []string, reserve func(int64) error, visit func(i int, r kvoffload.GetResult) (keep bool)) error {
	send, pos, err := n.readable(ctx, keys)
	if err != nil {
		return err
	}
	at := func(j int) int { return j }
	if pos != nil {
		at = func(j int) int { return pos[j] }
	}
	if err := n.coord.BatchGetEach(ctx, send, reserve, func(j int, r kvoffload.GetResult) bool { return visit(at(j), r) }); err != nil {
		return apiError(err, false)
	}
	if pos != nil {
		// After the reads, so that an error still comes before any visit (a caller taking
		// positions in order waits for them only when it sent invalid keys).
		sent := 0
		for i, k := range keys {
			if sent < len(pos) && pos[sent] == i {
				sent++
				continue
			}
			visit(i, invalidKey(k))
		}
	}
	return nil
}

// BatchExists reports each key's presence and, with lease > 0, pins the Present keys this
// node owns against eviction for lease (at most Config.MaxLease) (kvoffload.Store). Keys
// whose state this node cannot confirm with the leader are Unknown. Errors: ErrTooLarge
// (MaxBatchKeys), ErrClosed.
func (n *Node) BatchExists(ctx context.Context, keys []string, lease time.Duration) (kvoffload.ExistsResult, error) {
	if err := n.coord.CheckKeys(keys); err != nil {
		return kvoffload.ExistsResult{}, apiError(err, false)
	}
	if err := begun(ctx); err != nil {
		return kvoffload.ExistsResult{}, err
	}
	if lease < 0 {
		lease = 0
	}
	return n.coord.BatchExistsLease(ctx, keys, lease), nil
}

// Remove deletes keys (kvoffload.Store); a key that was not committed, or that CheckKey
// refuses, is Removed false. Errors: ErrTooLarge (MaxBatchKeys), ErrUnavailable (the removal
// could not be committed: call again, Remove is idempotent), ErrClosed.
func (n *Node) Remove(ctx context.Context, keys []string) ([]kvoffload.RemoveResult, error) {
	if err := n.coord.CheckKeys(keys); err != nil {
		return nil, apiError(err, false)
	}
	if err := begun(ctx); err != nil {
		return nil, err
	}
	res, err := n.coord.Remove(ctx, keys)
	if err != nil {
		return nil, apiError(err, false)
	}
	return res, nil
}

// Stats returns this node's view of the store (kvoffload.Stats). Errors: ErrUnavailable when
// the bucket accounting cannot be read.
func (n *Node) Stats(ctx context.Context) (kvoffload.Stats, error) {
	if err := n.coord.Usable(); err != nil {
		return kvoffload.Stats{}, apiError(err, false)
	}
	if err := begun(ctx); err != nil {
		return kvoffload.Stats{}, err
	}
	in, err := n.layerStats()
	if err != nil {
		return kvoffload.Stats{}, fmt.Errorf("%w: %w", kvoffload.ErrUnavailable, err)
	}
	own := n.fsm.Owners()[n.cfg.ID]
	t := in.Txn
	return kvoffload.Stats{
		NodeID: n.cfg.ID, Keys: uint64(in.Meta.Keys), Bytes: uint64(in.Meta.Bytes),
		LocalKeys: uint64(own.Keys), LocalBytes: uint64(own.Bytes),
		LiveBytes: in.Buckets.LiveBytes, AllocatedBytes: in.Buckets.AllocatedBytes,
		Counters: map[string]uint64{
			"txns": t.Txns, "stored": t.Stored, "already_stored": t.AlreadyStored, "joined": t.Joined,
			"conflicts": t.Conflicts, "rejected": t.Rejected, "failed": t.Failed, "waits": t.Waits,
			"aborts": t.Aborts, "gets": t.Gets, "get_corrupt": t.GetCorrupt, "removed": t.Removed,
			"payload_bytes_received": n.payloadIn.Load(),
		},
	}, nil
}

// apiError maps the coordinator's errors onto the Store's sentinels (kvoffload/errors.go),
// keeping the original in the chain. write says whether the call was an offload, whose
// unknown outcome is ErrIndeterminate rather than ErrUnavailable.
func apiError(err error, write bool) error {
	var sentinel error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, txn.ErrBatchTooLarge):
		sentinel = kvoffload.ErrTooLarge
	case errors.Is(err, txn.ErrTxnIDInUse):
		sentinel = kvoffload.ErrInvalidArgument
	case errors.Is(err, txn.ErrClosed):
		sentinel = kvoffload.ErrClosed
	case write && errors.Is(err, txn.ErrIndeterminate):
		sentinel = kvoffload.ErrIndeterminate
	case write && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		sentinel = kvoffload.ErrIndeterminate
	default:
		sentinel = kvoffload.ErrUnavailable
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}

// readable is a read's admission: MaxBatchKeys (counting every key, valid or not), a context
// that has not ended, and the keys CheckKey accepts with their positions (validKeys).
func (n *Node) readable(ctx context.Context, keys []string) (send []string, pos []int, err error) {
	if err := n.coord.CheckKeys(keys); err != nil {
		return nil, nil, apiError(err, false)
	}
	if err := begun(ctx); err != nil {
		return nil, nil, err
	}
	send, pos = validKeys(keys)
	return send, pos, nil
}

// validKeys returns the keys CheckKey accepts and their positions in keys; pos is nil only
// when every key is accepted (not when none is: the callers answer the others InvalidKey).
func validKeys(keys []string) (send []string, pos []int) {
	pos = []int{}
	for i, k := range keys {
		if kvoffload.CheckKey(k) == "" {
			send, pos = append(send, k), append(pos, i)
		}
	}
	if len(send) == len(keys) {
		return keys, nil
	}
	return send, pos
}

// spreadGets places the results of the sent keys (at pos; nil: all were sent) among
// InvalidKey results for the others.
func spreadGets(keys []string, got []kvoffload.GetResult, pos []int) []kvoffload.GetResult {
	out := got
	if pos != nil {
		out = make([]kvoffload.GetResult, len(keys))
		for i, k := range keys {
			out[i] = invalidKey(k)
		}
		for j, i := range pos {
			out[i] = got[j]
		}
	}
	return out
}

// invalidKey is the answer to a read of a key CheckKey refuses.
func invalidKey(k string) kvoffload.GetResult {
	return kvoffload.GetResult{Key: k, Status: kvoffload.InvalidKey, Code: kvoffload.CodeInvalidKey, Reason: kvoffload.CheckKey(k)}
}

// intoBuffer moves a Found value into buf, or marks r ShortBuffer when buf is too small.
func intoBuffer(r *kvoffload.GetResult, buf []byte) {
	if r.Status != kvoffload.Found {
		return
	}
	if len(buf) < len(r.Value) {
		*r = kvoffload.GetResult{Key: r.Key, Status: kvoffload.ShortBuffer, Size: len(r.Value), Code: kvoffload.CodeShortBuffer,
			Reason: fmt.Sprintf("buffer of %d bytes for a value of %d bytes", len(buf), len(r.Value))}
		return
	}
	r.Value = buf[:copy(buf, r.Value)]
}
