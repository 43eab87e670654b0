package txn

import (
	"fmt"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
)

// retried answers a call whose txn ID already has a final result in the FSM, from what
// admission found for b (validity, first copies, the keys' metadata). Keys are classified as
// plan does (invalid, repeated, first copy), so a true retry gets the original results. The
// result records, for every key the transaction wrote, the live entry it met; a call whose
// batch cannot be the one first sent (a recorded key missing, or sent with other bytes) gets
// ErrTxnIDInUse rather than the original results. An aborted transaction records no keys:
// its batch cannot be checked, and every key reports Failed.
func (c *Coordinator) retried(id fsm.TxnID, res *fsm.Result, b *batch) ([]kvoffload.KeyResult, error) {
	if res.Type != fsm.CmdCommit && res.Type != fsm.CmdAbort {
		return nil, fmt.Errorf("%w: txn %s names a %s command", ErrTxnIDInUse, id, res.Type)
	}
	out := make([]kvoffload.KeyResult, len(b.objs))
	if res.Aborted {
		for i, o := range b.objs {
			out[i].Key = o.Key
			failed(kvoffload.CodeAborted, fmt.Sprintf("txn %s was aborted; retry with a new txn ID", id)).set(&out[i])
		}
		return out, nil
	}
	byKey := make(map[string]fsm.KeyOutcome, len(res.Keys))
	for _, ko := range res.Keys {
		byKey[ko.Key] = ko
	}
	matched := 0
	var dups []dupRef
	for i, o := range b.objs {
		r := &out[i]
		r.Key = o.Key
		k := &b.keys[i]
		sum, size := b.sums[i], b.size(i)
		ko, recorded := byKey[o.Key]
		switch {
		case k.answered():
			k.v.set(r)
		case k.first != i:
			dups = append(dups, dupRef{idx: i, first: k.first})
		case recorded && !mayMatch(ko, sum, size):
			return nil, fmt.Errorf("%w: txn %s wrote key %q with other bytes", ErrTxnIDInUse, id, o.Key)
		case recorded:
			matched++
			fromFSM(ko.Outcome).set(r)
		case k.live: // a standing key: not written by this transaction, committed by another
			compare(k.entry, sum, size).set(r)
		default:
			failed(kvoffload.CodeTxnIDReused, "not written by the finished transaction with this ID; retry with a new txn ID").set(r)
		}
	}
	for _, d := range dups {
		out[d.idx] = repeated(out[d.first])
	}
	if matched < len(byKey) {
		sent := make(map[string]bool, len(b.objs))
		for i, o := range b.objs {
			sent[o.Key] = sent[o.Key] || b.valid(i)
		}
		for _, ko := range res.Keys {
			if !sent[ko.Key] {
				return nil, fmt.Errorf("%w: txn %s also wrote key %q", ErrTxnIDInUse, id, ko.Key)
			}
		}
	}
	return out, nil
}

// mayMatch reports whether offloading bytes with (sum, size) can be what the transaction that
// recorded ko proposed. ko.Entry is the live entry the commit met: the proposed one when
// Stored, one with the same bytes when AlreadyStored, one with other bytes when Conflict; a
// Stale key records no entry, so any bytes may match.
func mayMatch(ko fsm.KeyOutcome, sum uint64, size uint32) bool {
	same := ko.Entry.Sum == sum && ko.Entry.Size == size
	switch ko.Outcome {
	case fsm.OutcomeStored, fsm.OutcomeAlreadyStored:
		return same
	case fsm.OutcomeConflict:
		return !same
	}
	return true
}

// otherBatch returns a key of ws that res, the result of this transaction's COMMIT, shows
// was committed under the same txn ID with other bytes: the FSM kept another batch's COMMIT.
func otherBatch(res *fsm.Result, ws []*write) (string, bool) {
	byKey := make(map[string]fsm.KeyOutcome, len(res.Keys))
	for _, ko := range res.Keys {
		byKey[ko.Key] = ko
	}
	for _, w := range ws {
		if ko, ok := byKey[w.key]; ok && !mayMatch(ko, w.sum, uint32(len(w.value))) {
			return w.key, true
		}
	}
	return "", false
}
