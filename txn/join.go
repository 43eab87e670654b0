package txn

import (
	"context"
	"fmt"

	"github.com/kvoffload/kvoffload/bucketstore"
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
			r.Outcome, r.Reason = Failed, "gave up waiting for the in-flight offload of this key: "+ctx.Err().Error()
			continue
		}
		if e, ok := c.meta.Lookup(r.Key); ok {
			r.Outcome, r.Reason = compare(e, j.sum, j.size)
			continue
		}
		if j.fl.outcome.OK() {
			r.Outcome, r.Reason = Rejected, "stored by the in-flight offload this call joined, then removed concurrently"
			continue
		}
		r.Outcome, r.Reason = Failed, "the in-flight offload this key joined failed: "+j.fl.reason
	}
}

// retried answers a call whose txn ID already has a final result in the FSM.
func (c *Coordinator) retried(id fsm.TxnID, res *fsm.Result, objs []Object) []KeyResult {
	byKey := make(map[string]fsm.KeyOutcome, len(res.Keys))
	for _, ko := range res.Keys {
		byKey[ko.Key] = ko
	}
	out := make([]KeyResult, len(objs))
	for i, o := range objs {
		out[i].Key = o.Key
		ko, ok := byKey[o.Key]
		switch {
		case res.Aborted:
			out[i].Outcome, out[i].Reason = Failed, fmt.Sprintf("txn %s was aborted; retry with a new txn ID", id)
		case ok && ko.Outcome == fsm.OutcomeStored && ko.Entry.TxnID == id:
			out[i].Outcome = Stored
		case ok:
			out[i].Outcome, out[i].Reason = fromFSM(ko.Outcome)
		default:
			out[i].Outcome, out[i].Reason = c.standing(o)
		}
	}
	return out
}

// standing reports a key of a retried batch that its original transaction did not write.
func (c *Coordinator) standing(o Object) (Outcome, string) {
	if reason := c.invalid(o); reason != "" {
		return Rejected, reason
	}
	if e, ok := c.meta.Lookup(o.Key); ok {
		return compare(e, xxhashOf(o.Value), uint32(len(o.Value)))
	}
	return Failed, "not written by the finished transaction with this ID; retry with a new txn ID"
}

func fsmExtent(e bucketstore.Extent) fsm.Extent {
	return fsm.Extent{Bucket: e.Bucket, Offset: e.Offset, Length: e.Length}
}

func bucketExtent(e fsm.Extent) bucketstore.Extent {
	return bucketstore.Extent{Bucket: e.Bucket, Offset: e.Offset, Length: e.Length}
}
