package txn

import (
	"context"
	"fmt"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
)

// awaitJoins waits for the transactions this one joined and reports their outcome.
func (c *Coordinator) awaitJoins(ctx context.Context, p *plan) {
	for _, j := range p.joins {
		r := &p.results[j.idx]
		r.Joined = true
		select {
		case <-j.fl.done:
		case <-ctx.Done():
			r.Outcome, r.Code, r.Reason = kvoffload.Failed, kvoffload.CodeCanceled, "gave up waiting for the in-flight offload of this key: "+ctx.Err().Error()
			continue
		}
		if e, ok := c.meta.Lookup(r.Key); ok {
			r.Outcome, r.Code, r.Reason = compare(e, j.sum, j.size)
			continue
		}
		if j.fl.outcome.OK() {
			r.Outcome, r.Code, r.Reason = kvoffload.Rejected, kvoffload.CodeStaleGeneration, "stored by the in-flight offload this call joined, then removed concurrently"
			continue
		}
		r.Outcome, r.Code, r.Reason = kvoffload.Failed, j.fl.code, "the in-flight offload this key joined failed: "+j.fl.reason
	}
}

// retried answers a call whose txn ID already has a final result in the FSM (sums[i] is the
// xxhash64 of objs[i].Value). Keys are classified as plan does (invalid, repeated, first copy),
// so a true retry gets the original results. The result records, for every key the
// transaction wrote, the live entry it met; a call whose batch cannot be the one first sent
// (a recorded key missing, or sent with other bytes) gets ErrTxnIDInUse rather than the
// original results. An aborted transaction records no keys: its batch cannot be checked, and
// every key reports Failed.
func (c *Coordinator) retried(id fsm.TxnID, res *fsm.Result, objs []kvoffload.Object, sums []uint64) ([]kvoffload.KeyResult, error) {
	if res.Type != fsm.CmdCommit && res.Type != fsm.CmdAbort {
		return nil, fmt.Errorf("%w: txn %s names a %s command", ErrTxnIDInUse, id, res.Type)
	}
	out := make([]kvoffload.KeyResult, len(objs))
	if res.Aborted {
		for i, o := range objs {
			out[i] = kvoffload.KeyResult{Key: o.Key, Outcome: kvoffload.Failed, Code: kvoffload.CodeAborted,
				Reason: fmt.Sprintf("txn %s was aborted; retry with a new txn ID", id)}
		}
		return out, nil
	}
	byKey := make(map[string]fsm.KeyOutcome, len(res.Keys))
	for _, ko := range res.Keys {
		byKey[ko.Key] = ko
	}
	first := make(map[string]int, len(objs))
	matched := 0
	for i, o := range objs {
		r := &out[i]
		r.Key = o.Key
		if code, reason := c.invalid(o); code != kvoffload.CodeNone {
			r.Outcome, r.Code, r.Reason = kvoffload.Rejected, code, reason
			continue
		}
		if j, ok := first[o.Key]; ok {
			if sameBytes(objs, sums, i, j) {
				*r = repeated(out[j])
			} else {
				r.Outcome, r.Code, r.Reason = kvoffload.Conflict, kvoffload.CodeDuplicateKey, dupConflict
			}
			continue
		}
		first[o.Key] = i
		size := uint32(len(o.Value))
		ko, ok := byKey[o.Key]
		if !ok {
			r.Outcome, r.Code, r.Reason = c.standing(o, sums[i])
			continue
		}
		if !mayMatch(ko, sums[i], size) {
			return nil, fmt.Errorf("%w: txn %s wrote key %q with other bytes", ErrTxnIDInUse, id, o.Key)
		}
		matched++
		r.Outcome, r.Code, r.Reason = fromFSM(ko.Outcome)
	}
	if matched < len(byKey) {
		for _, ko := range res.Keys {
			if _, ok := first[ko.Key]; !ok {
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

// standing reports a key of a retried batch that its original transaction did not write.
func (c *Coordinator) standing(o kvoffload.Object, sum uint64) (kvoffload.Outcome, kvoffload.Code, string) {
	if e, ok := c.meta.Lookup(o.Key); ok {
		return compare(e, sum, uint32(len(o.Value)))
	}
	return kvoffload.Failed, kvoffload.CodeTxnIDReused, "not written by the finished transaction with this ID; retry with a new txn ID"
}
