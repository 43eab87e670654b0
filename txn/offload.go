package txn

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/mutant"
	"github.com/kvoffload/kvoffload/wal"
)

// BatchOffload stores objs as one transaction and returns one result per object, in input
// order. id is chosen by the caller (128-bit random); calling again with the same id and the
// same objects returns the original results (a retry after an indeterminate error is
// exactly-once). Calling again with the same id and other keys, sizes or bytes returns
// ErrTxnIDInUse, whether the first call is still running or has finished.
//
// A request-level error (ErrBatchTooLarge, ErrFailed, ErrClosed, ErrTxnIDInUse, a context
// error while joining a running retry) means nothing was accepted. Otherwise every key is in
// exactly one state: Stored, AlreadyStored, Conflict, Rejected or Failed, and
// Stored/AlreadyStored keys are readable when the call returns.
func (c *Coordinator) BatchOffload(ctx context.Context, id fsm.TxnID, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	if err := c.Usable(); err != nil {
		return nil, err
	}
	if err := c.checkBatch(objs); err != nil {
		return nil, err
	}
	// Catch up first (a read index through the leader; free on a single node). The FSM then
	// holds every result acknowledged before this call: a retry of a txn that another node
	// committed finds its original results, and no key is answered AlreadyStored or Conflict
	// from metadata that has not applied an acknowledged REMOVE (both checked by chaos's
	// TestProcessNemesis). It is bounded by OffloadCatchUpTimeout: with no leader elected by
	// then the call fails (nothing was written) and the client retries, on another member if
	// need be (TestOffloadCatchUpBounded).
	if err := c.OffloadCatchUp(ctx); err != nil {
		return nil, fmt.Errorf("%w: catching up before answering from metadata: %w", ErrIndeterminate, err)
	}
	b := c.admit(objs)
	c.inflight.mu.Lock()
	if r, busy := c.inflight.running[id]; busy {
		c.inflight.mu.Unlock()
		if r.sig != b.sig {
			return nil, fmt.Errorf("%w: txn %s", ErrTxnIDInUse, id)
		}
		select {
		case <-r.done:
			return append([]kvoffload.KeyResult(nil), r.results...), r.err
		case <-ctx.Done():
			return nil, fmt.Errorf("txn: waiting for the running call of txn %s: %w", id, ctx.Err())
		}
	}
	// Under c.inflight.mu: a finished call records its FSM result before it leaves running,
	// and the keys' metadata is read together with the in-flight table that plan reads.
	res, finished := c.meta.TxnResult(id)
	c.lookUp(b)
	if finished {
		c.inflight.mu.Unlock()
		return c.retried(id, res, b)
	}
	r := &running{done: make(chan struct{}), sig: b.sig}
	c.inflight.running[id] = r
	p := c.plan(id, b)
	c.inflight.mu.Unlock()
	r.results, r.err = c.offload(ctx, p)
	c.inflight.mu.Lock()
	delete(c.inflight.running, id)
	c.inflight.mu.Unlock()
	close(r.done)
	return r.results, r.err
}

// offload runs the transaction p plans: S1 to S6 for its writes, then the answers of the keys
// it joined or repeated.
func (c *Coordinator) offload(ctx context.Context, p *plan) ([]kvoffload.KeyResult, error) {
	if len(p.writes) > 0 {
		if err := c.acquire(ctx); err != nil {
			for _, w := range p.writes {
				w.v = rejected(kvoffload.CodeBackPressure, "back-pressure: no in-flight slot before the deadline: "+err.Error())
			}
			c.finish(p, p.writes)
		} else {
			c.stats.txns.Add(1)
			c.write(context.WithoutCancel(ctx), p)
			<-c.sem
			if p.err != nil {
				c.awaitJoins(ctx, p)
				return p.results, p.err
			}
		}
	}
	c.awaitJoins(ctx, p)
	for _, d := range p.dups {
		p.results[d.idx] = repeated(p.results[d.first])
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

// write runs S0 (reserve) to S3 for the keys this transaction owns, and ends them through
// commit or abort (resolve.go). It always finishes every write's flight.
func (c *Coordinator) write(ctx context.Context, p *plan) {
	ws := c.reserve(ctx, p)
	if len(ws) == 0 {
		return
	}
	_ = failpoint.Hit(failpoint.OffloadValidated)
	idx, err := c.logIntent(p.id, ws)
	if err != nil {
		c.failStop(err)
		c.fail(p, ws, kvoffload.CodeIO, err.Error()) // "wal: ...": the WAL names itself
		return
	}
	_ = failpoint.Hit(failpoint.IntentLogged)
	written, err := c.writeData(p.id, ws)
	if err != nil {
		c.abort(ctx, p, idx, ws, err)
		return
	}
	c.commit(ctx, p, idx, ws, written)
}

// reserve allocates an extent for every write; the ones that fail are finished at once. The
// whole batch is first reserved as one run (bucketstore.ReserveRun), so that writeData writes
// it with one pwrite per run; when that fails (the quota, the data filesystem's reserve, a run
// over a bucket) the writes are reserved one by one, each evicting for room (the quota only)
// and failing on its own: a key the filesystem has no room for above the reserve is Rejected
// with CodeNoSpace before anything of it is logged or written.
func (c *Coordinator) reserve(ctx context.Context, p *plan) []*write {
	sizes := make([]int64, len(p.writes))
	for i, w := range p.writes {
		sizes[i] = bucketstore.RecordSize(len(w.key), len(w.value))
	}
	if exts, err := c.data.ReserveRun(sizes); err == nil {
		for i, w := range p.writes {
			w.ext = exts[i]
		}
		return p.writes
	}
	var ok, bad []*write
	for _, w := range p.writes {
		ext, err := c.ev.reserve(ctx, bucketstore.RecordSize(len(w.key), len(w.value)))
		switch {
		case err == nil:
			w.ext = ext
			ok = append(ok, w)
			continue
		case errors.Is(err, bucketstore.ErrNoSpace):
			w.v = rejected(kvoffload.CodeQuota, "quota: "+err.Error())
		case errors.Is(err, bucketstore.ErrDiskFull):
			w.v = rejected(kvoffload.CodeNoSpace, err.Error())
		case errors.Is(err, bucketstore.ErrTooLarge):
			w.v = rejected(kvoffload.CodeTooLarge, "too large: "+err.Error())
		default:
			w.v = failed(kvoffload.CodeIO, "reserve: "+err.Error())
		}
		bad = append(bad, w)
	}
	if len(bad) > 0 {
		c.finish(p, bad)
	}
	return ok
}

func intentOf(node string, ws []*write) intent {
	in := intent{Node: node, Entries: make([]fsm.Entry, len(ws))}
	for i, w := range ws {
		in.Entries[i] = w.entry()
	}
	return in
}

// logIntent is S1. The intent is registered as unresolved (by its WAL index) before WAL
// truncation may run.
func (c *Coordinator) logIntent(id fsm.TxnID, ws []*write) (uint64, error) {
	return c.intents.append(c.log, wal.Record{Type: wal.RecordIntent, TxnID: id, Payload: intentOf(c.cfg.NodeID, ws).encode()})
}

// writeData is S2 and S3: write every record, then one group-committed fdatasync. A record
// that cannot be written fails only its own key (w.err; its siblings go on, docs/cases.md C6); a
// failed fdatasync fails them all, since it cannot say which bytes it lost.
func (c *Coordinator) writeData(id fsm.TxnID, ws []*write) ([]*write, error) {
	recs := make([]bucketstore.RecordWrite, len(ws))
	for i, w := range ws {
		recs[i] = bucketstore.RecordWrite{Ext: w.ext, Header: recordHeader(w.entry(), id), Payload: w.value}
	}
	var buckets []uint32
	var written []*write
	seen := map[uint32]bool{}
	for i, err := range c.data.WriteRecords(recs) {
		w := ws[i]
		if err != nil {
			w.err = fmt.Errorf("write: %w", err)
			continue
		}
		written = append(written, w)
		if !seen[w.ext.Bucket] {
			seen[w.ext.Bucket] = true
			buckets = append(buckets, w.ext.Bucket)
		}
	}
	if len(written) == 0 {
		return nil, ws[0].err
	}
	if err := failpoint.Hit(failpoint.DataWritten); err != nil {
		return nil, err
	}
	if mutant.On(mutant.CommitBeforeSync) { // mutation test only: write syncs after the COMMIT
		return written, failpoint.Hit(failpoint.DataSynced)
	}
	if err := c.data.Sync(buckets...); err != nil {
		return nil, fmt.Errorf("fdatasync: %w", err)
	}
	return written, failpoint.Hit(failpoint.DataSynced)
}
