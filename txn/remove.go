package txn

import (
	"context"
	"fmt"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/mutant"
)

// Remove deletes keys: the metadata removal is committed through Raft first, and the bytes
// are freed only after it is applied and the readers holding them have finished. A removed
// key's generation advances, so an offload that was in flight before the removal cannot
// commit its older version afterwards.
func (c *Coordinator) Remove(ctx context.Context, keys []string) ([]kvoffload.RemoveResult, error) {
	return c.RemoveTxn(ctx, kvoffload.NewTxnID(), keys)
}

// RemoveTxn is Remove under a caller-chosen txn ID: a retry with the same ID returns the
// original answer and removes nothing more (a key stored again in between stays). Keys that
// can never be stored (empty, longer than MaxKeyBytes, not UTF-8, control characters) are
// answered not removed without going through Raft.
//
// An ID already used for another request is refused with ErrTxnIDInUse, as BatchOffload
// refuses one: an offload running or recorded under it, or a REMOVE recorded under it for
// other keys. The FSM de-duplicates by txn ID, so without the check such a call would be
// handed the other request's result and answer "not removed" for keys it never removed.
func (c *Coordinator) RemoveTxn(ctx context.Context, id fsm.TxnID, keys []string) ([]kvoffload.RemoveResult, error) {
	if err := c.Usable(); err != nil {
		return nil, err
	}
	if len(keys) > c.cfg.MaxBatchKeys {
		return nil, BatchKeysError(uint64(len(keys)), keys[c.cfg.MaxBatchKeys], c.cfg.MaxBatchKeys)
	}
	out := make([]kvoffload.RemoveResult, len(keys))
	var kg []fsm.KeyGen
	var at []int // index in keys of each kg entry
	for i, k := range keys {
		out[i].Key = k
		if c.invalidKey(k) != "" {
			continue // never stored: nothing to remove, and no generation burnt for it
		}
		kg, at = append(kg, fsm.KeyGen{Key: k}), append(at, i)
	}
	if len(kg) == 0 {
		return out, nil
	}
	c.inflight.mu.Lock()
	_, running := c.inflight.running[id]
	c.inflight.mu.Unlock()
	if running {
		return nil, fmt.Errorf("%w: txn %s is a batch offload still running", ErrTxnIDInUse, id)
	}
	// A finished request under this ID known here is refused before it costs a proposal; one
	// this node has not applied yet is caught on the proposal's (de-duplicated) result.
	if res, ok := c.meta.TxnResult(id); ok {
		if err := sameRemove(id, res, kg); err != nil {
			return nil, err
		}
	}
	if mutant.On(mutant.FreeBeforeRemove) { // mutation test only: freed before the REMOVE is applied
		for _, g := range kg {
			if e, ok := c.meta.Lookup(g.Key); ok && e.Owner == c.cfg.NodeID {
				c.reclaim.free(e.Extent)
			}
		}
	}
	if mutant.On(mutant.RemoveAckBeforeCommit) { // mutation test only: answered, then proposed
		go c.propose(context.WithoutCancel(ctx), fsm.EncodeRemove(fsm.Remove{TxnID: id, Keys: kg, Reason: "remove"}), once)
		for i := range out {
			out[i].Removed = true
		}
		return out, nil
	}
	res, err := c.propose(ctx, fsm.EncodeRemove(fsm.Remove{TxnID: id, Keys: kg, Reason: "remove"}), once)
	if err != nil {
		return nil, fmt.Errorf("txn: remove: %w", err)
	}
	c.reclaim.flush(ctx) // the removed keys' bytes are free (unless pinned) when Remove returns
	if err := sameRemove(id, res, kg); err != nil {
		return nil, err
	}
	removed := make(map[string]bool, len(res.Keys)) // by key: a retry gets the original result
	for _, ko := range res.Keys {
		removed[ko.Key] = removed[ko.Key] || ko.Outcome == fsm.OutcomeRemoved
	}
	for _, i := range at {
		out[i].Removed = removed[keys[i]]
	}
	return out, nil
}

// sameRemove returns ErrTxnIDInUse unless res, the result recorded under id, is a REMOVE of
// exactly the keys in kg (a retry of this call).
func sameRemove(id fsm.TxnID, res *fsm.Result, kg []fsm.KeyGen) error {
	if res.Type != fsm.CmdRemove {
		return fmt.Errorf("%w: txn %s names a %s command, not a remove", ErrTxnIDInUse, id, res.Type)
	}
	recorded := make(map[string]bool, len(res.Keys))
	for _, ko := range res.Keys {
		recorded[ko.Key] = true
	}
	asked := make(map[string]bool, len(kg))
	for _, g := range kg {
		asked[g.Key] = true
		if !recorded[g.Key] {
			return fmt.Errorf("%w: txn %s removed other keys, not %q", ErrTxnIDInUse, id, g.Key)
		}
	}
	for _, ko := range res.Keys {
		if !asked[ko.Key] {
			return fmt.Errorf("%w: txn %s also removed key %q", ErrTxnIDInUse, id, ko.Key)
		}
	}
	return nil
}
