package client

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/internal/wire"
)

// BatchOffload stores objs as one transaction named id and returns one result per object, in
// order (kvoffload.Store). Calls whose outcome is unknown are retried with the same id (see
// the package doc), so the batch takes effect exactly once; id must be fresh (NewTxnID) for
// each new batch. If a retried attempt finds id aborted (CodeAborted: the lost attempt was
// rolled back, storing nothing), the batch is sent once more under a fresh ID and the
// results are that transaction's. The values must not be modified until the call returns.
// On a local member, values that all lie in one Region of this client travel as
// descriptors of it, as OffloadFrom's do (no staging copy, no precheck); others are copied
// into a staging region. Either way the node has let go of the values when the call
// returns, also after an error (it then waits up to 10 s for the node to finish the
// transaction it began).
//
// A key that kvoffload.CheckKey refuses is Rejected (CodeInvalidKey) at once and not sent;
// the other objects are sent as the batch (if none is left, nothing is sent).
//
// Errors, when no results could be obtained: kvoffload.ErrInvalidArgument (a zero id, or an
// id used for a different batch), ErrTooLarge (over MaxBatchKeys or MaxBatchBytes, or keys of
// more than MaxBatchKeys x MaxKeyBytes bytes in all), ErrDenied (nothing was stored; none of
// these is retried); ErrIndeterminate when ctx ended (it wraps the context's error too) or
// MaxAttempts ran out while the outcome was unknown: call again with the same id to learn it;
// ErrClosed.
func (c *Client) BatchOffload(ctx context.Context, id kvoffload.TxnID, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	if err := kvoffload.CheckTxnID(id); err != nil {
		return nil, err
	}
	if err := c.checkKeys("BatchOffload", len(objs), func(i int) string { return objs[i].Key }); err != nil {
		return nil, err
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	return sendOnly(objs, func(o kvoffload.Object) string { return o.Key },
		func(o kvoffload.Object) kvoffload.KeyResult {
			return kvoffload.KeyResult{Key: o.Key, Outcome: kvoffload.Rejected, Code: kvoffload.CodeInvalidKey,
				Reason: kvoffload.CheckKey(o.Key) + "; not sent"}
		},
		func(objs []kvoffload.Object) ([]kvoffload.KeyResult, error) { return c.batchOffload(ctx, id, objs) })
}

// batchOffload runs BatchOffload for objects whose keys can all be sent.
func (c *Client) batchOffload(ctx context.Context, id kvoffload.TxnID, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	var out []kvoffload.KeyResult
	renewed := false
	var stored []bool // the precheck's answer, decided once before anything is uploaded
	decided := c.opt.NoPrecheck
	err := c.retry(ctx, "BatchOffload", true, func(ctx context.Context, a *attempt) error {
		if !decided {
			s, err := c.precheck(ctx, a, id, objs)
			if err != nil {
				return err // nothing was uploaded yet
			}
			stored, decided = s, true
		}
		send, pos := needed(objs, stored)
		if len(send) == 0 && pos != nil { // every key is stored: nothing to upload
			out = spreadStored(objs, nil, pos, stored)
			return nil
		}
		res, err := c.offloadOnce(ctx, a, id, send)
		if err != nil {
			return err
		}
		if pos != nil {
			res = spreadStored(objs, res, pos, stored)
		}
		if a.n > 1 && !renewed && allAborted(res) {
			// An earlier attempt was cut off and the cluster aborted that transaction: it
			// stored nothing, and its ID now answers "aborted" for ever. Start afresh.
			old := id
			id, renewed = kvoffload.NewTxnID(), true
			c.lg.Warn("transaction aborted after a retry; resending with a new ID",
				"old_txn", old.String(), "txn", id.String(), "objects", len(objs))
			return errRenew
		}
		out = res
		return nil
	})
	if errors.Is(err, kvoffload.ErrProtocol) {
		return nil, fmt.Errorf("%w (%w)", kvoffload.ErrIndeterminate, err)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// offloadOnce streams the batch to the attempt's member once.
func (c *Client) offloadOnce(ctx context.Context, a *attempt, id kvoffload.TxnID, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	for _, o := range objs {
		if n := int64(len(o.Value)); n > c.valueHint.Load() {
			c.valueHint.Store(n) // racy max: a hint only
		}
	}
	if a.m.local != nil {
		if res, ok, err := c.offloadLocal(ctx, a, id, objs); ok {
			return res, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // tears the stream down on every early return
	st, err := a.m.kv.BatchOffload(ctx)
	if err != nil {
		return nil, err
	}
	send := func(ch *kvoffloadv1.OffloadChunk) error {
		err := st.Send(ch)
		if err == nil {
			a.sent()
		}
		return err
	}
	if err := sendObjects(send, id, objs, c.opt.ChunkSize); err != nil {
		if !isEOF(err) {
			return nil, err
		}
		// The member ended the stream; its status says why.
		if _, err = st.CloseAndRecv(); err == nil {
			err = fmt.Errorf("%w: the member replied before the batch was sent", errStreamEnded)
		}
		return nil, err
	}
	resp, err := st.CloseAndRecv()
	if err != nil {
		return nil, err
	}
	a.received()
	return keyResults(resp, objs)
}

// sendObjects frames objs as OffloadChunk messages: the first carries the transaction ID, each
// object starts with a chunk holding its key and size, and no chunk holds more than chunk
// value bytes. Data slices alias the values; nothing is copied.
func sendObjects(send func(*kvoffloadv1.OffloadChunk) error, id kvoffload.TxnID, objs []kvoffload.Object, chunk int) error {
	txnID := id[:]
	first := func(ch *kvoffloadv1.OffloadChunk) *kvoffloadv1.OffloadChunk {
		if txnID != nil {
			ch.TxnId, txnID = txnID, nil
		}
		return ch
	}
	for _, o := range objs {
		v := o.Value
		n := min(len(v), chunk)
		if err := send(first(&kvoffloadv1.OffloadChunk{Key: o.Key, Size: uint64(len(v)), Data: v[:n]})); err != nil {
			return err
		}
		for off := n; off < len(v); off += chunk {
			if err := send(&kvoffloadv1.OffloadChunk{Data: v[off:min(off+chunk, len(v))]}); err != nil {
				return err
			}
		}
	}
	if txnID != nil { // an empty batch still names its transaction
		return send(first(&kvoffloadv1.OffloadChunk{}))
	}
	return nil
}

// keyResults maps a response to one result per object.
func keyResults(resp *kvoffloadv1.OffloadResponse, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	if len(resp.GetResults()) != len(objs) {
		return nil, fmt.Errorf("%w: %d results for %d objects", kvoffload.ErrProtocol, len(resp.GetResults()), len(objs))
	}
	out := make([]kvoffload.KeyResult, len(objs))
	for i, r := range resp.GetResults() {
		out[i] = wire.KeyResultFromPB(r, objs[i].Key)
	}
	return out, nil
}

// allAborted reports whether every key failed because its transaction was aborted.
func allAborted(res []kvoffload.KeyResult) bool {
	for _, r := range res {
		if r.Outcome != kvoffload.Failed || r.Code != kvoffload.CodeAborted {
			return false
		}
	}
	return len(res) > 0
}

// sendOnly calls call with the items whose keys can be sent (if any) and returns its answers
// with each other item answered by unsent, in the order of items.
func sendOnly[T, R any](items []T, key func(T) string, unsent func(T) R, call func([]T) ([]R, error)) ([]R, error) {
	send, pos := partition(items, key)
	if pos == nil {
		return call(items)
	}
	var got []R
	if len(send) > 0 {
		var err error
		if got, err = call(send); err != nil {
			return nil, err
		}
	}
	return spread(items, got, pos, unsent), nil
}

// partition returns the items whose keys can be sent and, when some cannot, the position in
// items of each one returned (pos is nil when every key can be sent: items itself is
// returned).
func partition[T any](items []T, key func(T) string) (send []T, pos []int) {
	for i, it := range items {
		if sendable(key(it)) {
			if pos != nil {
				send, pos = append(send, it), append(pos, i)
			}
			continue
		}
		if pos == nil {
			send, pos = append([]T(nil), items[:i]...), make([]int, i, len(items))
			for j := range pos {
				pos[j] = j
			}
		}
	}
	if pos == nil {
		return items, nil
	}
	return send, pos
}

// spread places the answers for the sent items (got[j] answers items[pos[j]]) at their
// positions, and answers each item that was not sent with unsent.
func spread[T, R any](items []T, got []R, pos []int, unsent func(T) R) []R {
	out := make([]R, len(items))
	done := make([]bool, len(items))
	for j, p := range pos {
		out[p], done[p] = got[j], true
	}
	for i, it := range items {
		if !done[i] {
			out[i] = unsent(it)
		}
	}
	return out
}

// precheck asks the attempt's member which objects are already stored with the same size
// and checksum (the lean path: their payloads are not uploaded). nil means upload all: the
// values lie in a Region of a local member (the node reads them in place: asking first would
// save no copy and cost a pass over every value, a call and a read index), the batch repeats
// a key (whose results the coordinator decides together), or the member predates Precheck
// (remembered).
func (c *Client) precheck(ctx context.Context, a *attempt, id kvoffload.TxnID, objs []kvoffload.Object) ([]bool, error) {
	if a.m.noPrecheck.Load() || len(objs) == 0 || inRegion(a, objs) {
		return nil, nil
	}
	req := &kvoffloadv1.PrecheckRequest{TxnId: id[:], Keys: make([]*kvoffloadv1.PrecheckKey, len(objs))}
	seen := make(map[string]bool, len(objs))
	for i, o := range objs {
		if seen[o.Key] {
			return nil, nil
		}
		seen[o.Key] = true
		req.Keys[i] = &kvoffloadv1.PrecheckKey{Key: o.Key, Size: uint64(len(o.Value)), Sum: xxhash.Sum64(o.Value)}
	}
	resp, err := a.m.kv.Precheck(ctx, req)
	if status.Code(err) == codes.Unimplemented {
		a.m.noPrecheck.Store(true)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	a.received()
	if len(resp.GetStored()) != len(objs) {
		return nil, fmt.Errorf("%w: Precheck: %d answers for %d keys", kvoffload.ErrProtocol, len(resp.GetStored()), len(objs))
	}
	return resp.GetStored(), nil
}

// needed returns the objects to upload and, when some are skipped, their positions in objs
// (nil pos: all of objs).
func needed(objs []kvoffload.Object, stored []bool) ([]kvoffload.Object, []int) {
	if !slices.Contains(stored, true) {
		return objs, nil
	}
	send, pos := []kvoffload.Object{}, []int{}
	for i, o := range objs {
		if !stored[i] {
			send, pos = append(send, o), append(pos, i)
		}
	}
	return send, pos
}

// spreadStored places res (the answers for objs[pos]) and answers every skipped object
// AlreadyStored.
func spreadStored(objs []kvoffload.Object, res []kvoffload.KeyResult, pos []int, stored []bool) []kvoffload.KeyResult {
	return spread(objs, res, pos, func(o kvoffload.Object) kvoffload.KeyResult {
		return kvoffload.KeyResult{Key: o.Key, Outcome: kvoffload.AlreadyStored,
			Reason: "already stored with the same size and checksum (precheck); no payload sent"}
	})
}

// inRegion reports whether a's member is local and every value of objs lies in one of its
// registered regions (they then travel as descriptors: offloadLocal).
func inRegion(a *attempt, objs []kvoffload.Object) bool {
	if a.m.local == nil {
		return false
	}
	r, _ := a.m.local.staging.reg.holding(len(objs), func(i int) []byte { return objs[i].Value })
	return r != nil
}
