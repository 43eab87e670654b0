package txn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/wal"
)

// BatchOffload stores objs as one transaction and returns one result per object, in input
// order. id is chosen by the caller (128-bit random); calling again with the same id returns
// the original results (a retry after an indeterminate error is exactly-once).
//
// A request-level error (ErrBatchTooLarge, ErrFailed, ErrClosed, a context error while
// joining a running retry) means nothing was accepted. Otherwise every key is in exactly one
// state: Stored, AlreadyStored, Conflict, Rejected or Failed, and Stored/AlreadyStored keys
// are readable when the call returns.
func (c *Coordinator) BatchOffload(ctx context.Context, id fsm.TxnID, objs []Object) ([]KeyResult, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := c.checkBatch(objs); err != nil {
		return nil, err
	}
	if res, ok := c.meta.TxnResult(id); ok {
		return c.retried(id, res, objs), nil
	}
	c.mu.Lock()
	r, busy := c.running[id]
	if !busy {
		r = &running{done: make(chan struct{})}
		c.running[id] = r
	}
	c.mu.Unlock()
	if busy {
		select {
		case <-r.done:
			return append([]KeyResult(nil), r.results...), r.err
		case <-ctx.Done():
			return nil, fmt.Errorf("txn: waiting for the running call of txn %s: %w", id, ctx.Err())
		}
	}
	r.results, r.err = c.offload(ctx, id, objs)
	c.mu.Lock()
	delete(c.running, id)
	c.mu.Unlock()
	close(r.done)
	return r.results, r.err
}

func (c *Coordinator) offload(ctx context.Context, id fsm.TxnID, objs []Object) ([]KeyResult, error) {
	p := c.plan(id, objs)
	if len(p.writes) > 0 {
		if err := c.acquire(ctx); err != nil {
			for _, w := range p.writes {
				w.outcome, w.reason = Rejected, "back-pressure: no in-flight slot before the deadline: "+err.Error()
			}
			c.finish(p, p.writes)
		} else {
			c.stats.txns.Add(1)
			c.write(context.WithoutCancel(ctx), p)
			<-c.sem
		}
	}
	c.awaitJoins(ctx, p)
	for _, d := range p.dups {
		r := p.results[d.first]
		if r.Outcome.OK() {
			r.Outcome, r.Reason = AlreadyStored, ""
		}
		r.Joined = false
		p.results[d.idx] = r
	}
	for _, r := range p.results {
		c.stats.count(r)
	}
	_ = failpoint.Hit(failpoint.Acked)
	return p.results, nil
}

// acquire takes an in-flight slot, waiting (back-pressure) until ctx ends.
func (c *Coordinator) acquire(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	default:
	}
	c.stats.waits.Add(1)
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write runs S0 (reserve) to S5 for the keys this transaction owns. It always finishes
// every write's flight.
func (c *Coordinator) write(ctx context.Context, p *plan) {
	ws := c.reserve(p)
	if len(ws) == 0 {
		return
	}
	_ = failpoint.Hit(failpoint.OffloadValidated)
	if err := c.logIntent(p.id, ws); err != nil {
		c.failStop(err)
		c.fail(p, ws, "wal: "+err.Error())
		return
	}
	_ = failpoint.Hit(failpoint.IntentLogged)
	if err := c.writeData(p.id, ws); err != nil {
		c.abort(ctx, p, ws, err)
		return
	}
	res, err := c.propose(ctx, intentOf(c.cfg.NodeID, ws).commit(p.id))
	if err != nil {
		c.fail(p, ws, fmt.Sprintf("indeterminate commit (%v): retry with the same txn ID", err))
		c.resolveLater(p.id, ws)
		return
	}
	_ = failpoint.Hit(failpoint.MetaCommitted)
	c.settle(p.id, ws, res, "")
	c.finish(p, ws)
}

// reserve allocates an extent for every write; the ones that fail are finished at once.
func (c *Coordinator) reserve(p *plan) []*write {
	var ok, bad []*write
	for _, w := range p.writes {
		ext, err := c.data.Reserve(bucketstore.RecordSize(len(w.key), len(w.value)))
		switch {
		case err == nil:
			w.ext = ext
			ok = append(ok, w)
			continue
		case errors.Is(err, bucketstore.ErrNoSpace):
			w.outcome, w.reason = Rejected, "quota: "+err.Error()
		case errors.Is(err, bucketstore.ErrTooLarge):
			w.outcome, w.reason = Rejected, "too large: "+err.Error()
		default:
			w.outcome, w.reason = Failed, "reserve: "+err.Error()
		}
		bad = append(bad, w)
	}
	if len(bad) > 0 {
		c.finish(p, bad)
	}
	return ok
}

func intentOf(node string, ws []*write) intent {
	in := intent{Node: node, Entries: make([]intentEntry, len(ws))}
	for i, w := range ws {
		in.Entries[i] = w.entry()
	}
	return in
}

// logIntent is S1. The intent is registered as unresolved before WAL truncation may run.
func (c *Coordinator) logIntent(id fsm.TxnID, ws []*write) error {
	c.truncMu.RLock()
	defer c.truncMu.RUnlock()
	idx, err := c.log.Append(wal.Record{Type: wal.RecordIntent, TxnID: id, Payload: intentOf(c.cfg.NodeID, ws).encode()})
	if err != nil {
		return err
	}
	c.unresMu.Lock()
	c.unresolved[id] = idx
	c.unresMu.Unlock()
	return nil
}

// writeData is S2 and S3: write every record, then one group-committed fdatasync.
func (c *Coordinator) writeData(id fsm.TxnID, ws []*write) error {
	buckets := make([]uint32, 0, 1)
	seen := map[uint32]bool{}
	for _, w := range ws {
		if err := c.data.WriteRecord(w.ext, w.header(id), w.value); err != nil {
			return fmt.Errorf("write %q: %w", w.key, err)
		}
		if !seen[w.ext.Bucket] {
			seen[w.ext.Bucket] = true
			buckets = append(buckets, w.ext.Bucket)
		}
	}
	if err := failpoint.Hit(failpoint.DataWritten); err != nil {
		return err
	}
	if err := c.data.Sync(buckets...); err != nil {
		return fmt.Errorf("fdatasync: %w", err)
	}
	return failpoint.Hit(failpoint.DataSynced)
}

func (c *Coordinator) propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CommitTimeout)
	defer cancel()
	return c.meta.Propose(ctx, cmd)
}

// abort resolves a transaction whose data could not be made durable.
func (c *Coordinator) abort(ctx context.Context, p *plan, ws []*write, cause error) {
	reason := "data: " + cause.Error()
	res, err := c.propose(ctx, fsm.EncodeAbort(fsm.Abort{TxnID: p.id, Node: c.cfg.NodeID, Reason: reason}))
	if err != nil {
		c.fail(p, ws, reason)
		c.resolveLater(p.id, ws)
		return
	}
	c.settle(p.id, ws, res, reason)
	c.finish(p, ws)
}

// fail finishes ws as Failed without settling them (settlement happens later).
func (c *Coordinator) fail(p *plan, ws []*write, reason string) {
	for _, w := range ws {
		w.outcome, w.reason = Failed, reason
	}
	c.finish(p, ws)
}

// settle applies a transaction's final FSM result to its writes: outcomes are set, the
// extents the metadata does not reference are freed, and DONE is queued in the WAL.
func (c *Coordinator) settle(id fsm.TxnID, ws []*write, res *fsm.Result, abortReason string) {
	byKey := make(map[string]fsm.KeyOutcome, len(res.Keys))
	for _, ko := range res.Keys {
		byKey[ko.Key] = ko
	}
	for _, w := range ws {
		ko, ok := byKey[w.key]
		switch {
		case res.Aborted:
			w.outcome, w.reason = Failed, "aborted: "+abortReason
		case !ok:
			w.outcome, w.reason = Failed, "key missing from the commit result"
		case ko.Outcome == fsm.OutcomeStored && ko.Entry.TxnID == id && ko.Entry.Extent == fsmExtent(w.ext):
			w.outcome, w.reason = Stored, ""
			continue
		default:
			w.outcome, w.reason = fromFSM(ko.Outcome)
		}
		c.free(w.ext)
	}
	if res.Aborted {
		c.stats.aborts.Add(1)
	}
	c.done(id)
}

// done queues the DONE record and drops the intent from the unresolved set.
func (c *Coordinator) done(id fsm.TxnID) {
	c.log.AppendAsync(wal.Record{Type: wal.RecordDone, TxnID: id})
	_ = failpoint.Hit(failpoint.DoneLogged)
	c.unresMu.Lock()
	delete(c.unresolved, id)
	c.unresMu.Unlock()
	c.maybeTruncate()
}

// resolveLater settles a transaction whose COMMIT or ABORT had an indeterminate outcome:
// after a Barrier the FSM either knows the transaction, or an ABORT is proposed; the FSM keeps
// whichever of COMMIT and ABORT came first.
func (c *Coordinator) resolveLater(id fsm.TxnID, ws []*write) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		for delay := 50 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
			if res, err := c.resolve(c.bgCtx, id); err == nil {
				c.settle(id, ws, res, "indeterminate commit")
				return
			}
			select {
			case <-c.bgCtx.Done():
				return // recovery at the next start-up resolves the intent
			case <-time.After(delay):
			}
		}
	}()
}

// resolve returns the final result of a transaction, proposing ABORT if the FSM has none.
func (c *Coordinator) resolve(ctx context.Context, id fsm.TxnID) (*fsm.Result, error) {
	bctx, cancel := context.WithTimeout(ctx, c.cfg.CommitTimeout)
	defer cancel()
	if err := c.meta.Barrier(bctx); err != nil {
		return nil, err
	}
	if res, ok := c.meta.TxnResult(id); ok {
		return res, nil
	}
	return c.propose(ctx, fsm.EncodeAbort(fsm.Abort{TxnID: id, Node: c.cfg.NodeID, Reason: "indeterminate commit"}))
}

// maybeTruncate drops resolved history from the front of the WAL.
func (c *Coordinator) maybeTruncate() {
	if c.log.LastIndex()-c.log.FirstIndex() < c.cfg.TruncateEvery {
		return
	}
	c.truncMu.Lock()
	defer c.truncMu.Unlock()
	first, target := c.log.FirstIndex(), c.log.LastIndex()
	if target-first < c.cfg.TruncateEvery {
		return
	}
	c.unresMu.Lock()
	for _, idx := range c.unresolved {
		target = min(target, idx)
	}
	c.unresMu.Unlock()
	if target <= first {
		return
	}
	if err := c.log.TruncateFront(target); err != nil {
		c.failStop(fmt.Errorf("wal truncate: %w", err))
	}
}

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
		r.Outcome, r.Reason = Failed, "the in-flight offload this key joined did not store it: "+j.fl.reason
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
