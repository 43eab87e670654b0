package txn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/mutant"
	"github.com/kvoffload/kvoffload/wal"
)

// The end of a transaction's writes, every way it can end: commit (S4 to S6, once the
// records are durable), abort (their data failed), fail (the intent could not be logged, or
// the COMMIT's outcome is unknown: settled later by resolveLater), or finish alone (a write
// refused before its intent). Each way sets the writes' verdicts, then finish hands them to
// the flights and the results. Every proposal goes through propose.

// commit is S4 to S6 for ws, of which written are the writes whose records were written and
// synced: the COMMIT is proposed until its outcome is known, the FSM's result settles ws,
// and they are finished. A COMMIT whose outcome stays unknown fails ws now (CodeUnavailable:
// the caller retries with the same txn ID) and settles them once resolveLater knows it.
func (c *Coordinator) commit(ctx context.Context, p *plan, idx uint64, ws, written []*write) {
	res, err := c.propose(ctx, intentOf(c.cfg.NodeID, written).commitCmd(p.id), untilKnown)
	if err != nil {
		c.fail(p, ws, kvoffload.CodeUnavailable, fmt.Sprintf("indeterminate commit (%v): retry with the same txn ID", err))
		p.err = fmt.Errorf("%w: txn %s: %w", ErrIndeterminate, p.id, err)
		c.resolveLater(p.id, idx, ws)
		return
	}
	_ = failpoint.Hit(failpoint.MetaCommitted)
	if mutant.On(mutant.CommitBeforeSync) { // mutation test only: the fdatasync after the COMMIT
		_ = c.data.Sync()
	}
	c.settle(p.id, idx, ws, res, kvoffload.CodeAborted, "")
	if key, ok := otherBatch(res, ws); ok {
		// The FSM de-duplicated this COMMIT against one of another batch under the same txn
		// ID (a call on another node): none of these keys was stored by this call.
		for _, w := range ws {
			w.v = failed(kvoffload.CodeTxnIDReused, "txn ID already used for a different batch")
		}
		p.err = fmt.Errorf("%w: txn %s committed key %q with other bytes", ErrTxnIDInUse, p.id, key)
	}
	c.finish(p, ws)
}

// abort resolves a transaction whose data could not be made durable.
func (c *Coordinator) abort(ctx context.Context, p *plan, idx uint64, ws []*write, cause error) {
	reason := "data: " + cause.Error()
	// Record durably, before anything else, that this transaction's data failed: if the
	// process dies before the ABORT is applied, recovery must not roll it forward on the
	// strength of a later fdatasync that succeeds after the kernel dropped the failed pages
	// ("fsyncgate"). A WAL that cannot take the mark fail-stops like any WAL error.
	if _, err := c.log.Append(wal.Record{Type: wal.RecordDataFailed, TxnID: p.id}); err != nil {
		c.failStop(err)
	}
	res, err := c.propose(ctx, fsm.EncodeAbort(fsm.Abort{TxnID: p.id, Node: c.cfg.NodeID, Reason: fsm.AbortReason(reason)}), once)
	if err != nil {
		c.fail(p, ws, kvoffload.CodeIO, reason)
		c.resolveLater(p.id, idx, ws)
		return
	}
	c.settle(p.id, idx, ws, res, kvoffload.CodeIO, reason)
	c.finish(p, ws)
}

// fail finishes ws as Failed with code and reason, without settling them (settlement happens
// later).
func (c *Coordinator) fail(p *plan, ws []*write, code kvoffload.Code, reason string) {
	for _, w := range ws {
		w.v = failed(code, reason)
	}
	c.finish(p, ws)
}

// finish completes the flights of ws with their verdicts and makes them the keys' results.
func (c *Coordinator) finish(p *plan, ws []*write) {
	c.inflight.mu.Lock()
	defer c.inflight.mu.Unlock()
	for _, w := range ws {
		if c.inflight.flights[w.key] == w.fl {
			delete(c.inflight.flights, w.key)
		}
		w.fl.v = w.v
		close(w.fl.done)
		w.v.set(&p.results[w.idx])
	}
}

// settle applies a transaction's final FSM result to its writes: verdicts are set, the
// extents the metadata does not reference are freed, and DONE is queued in the WAL.
func (c *Coordinator) settle(id fsm.TxnID, idx uint64, ws []*write, res *fsm.Result, abortCode kvoffload.Code, abortReason string) {
	byKey := make(map[string]fsm.KeyOutcome, len(res.Keys))
	for _, ko := range res.Keys {
		byKey[ko.Key] = ko
	}
	for _, w := range ws {
		ko, ok := byKey[w.key]
		switch {
		case errors.Is(w.err, bucketstore.ErrPayloadChanged): // before Aborted: a batch of only such keys aborts
			w.v = rejected(kvoffload.CodeInvalidValue,
				"the value changed while it was being written (a value must not be modified during the call): "+w.err.Error())
		case res.Aborted:
			w.v = failed(abortCode, "aborted: "+abortReason)
		case w.err != nil:
			w.v = failed(kvoffload.CodeIO, w.err.Error())
		case !ok:
			w.v = failed(kvoffload.CodeInternal, "key missing from the commit result")
		case ko.Outcome == fsm.OutcomeStored && ko.Entry.TxnID == id && ko.Entry.Owner == c.cfg.NodeID &&
			ko.Entry.Extent == w.ext:
			w.v = stored
			continue
		default:
			w.v = fromFSM(ko.Outcome)
		}
		if e, live := c.meta.Lookup(w.key); live && e.TxnID == id && e.Owner == c.cfg.NodeID && e.Extent == w.ext {
			// The metadata holds this write as committed though the result says otherwise: the
			// COMMIT applied and its result was pruned before this settle, which then proposed
			// an ABORT or re-proposed the COMMIT (AlreadyStored). The bytes are a live entry's:
			// keep them, or the key reads Corrupt, breaking G1
			// (TestResolverAfterPruneKeepsCommittedBytes).
			w.v = stored
			continue
		}
		c.reclaim.free(w.ext)
	}
	if res.Aborted {
		c.stats.aborts.Add(1)
	}
	c.done(id, idx)
}

// done queues the DONE record and drops the intent at WAL index idx from the unresolved set.
func (c *Coordinator) done(id fsm.TxnID, idx uint64) {
	c.log.AppendAsync(wal.Record{Type: wal.RecordDone, TxnID: id})
	_ = failpoint.Hit(failpoint.DoneLogged)
	c.intents.resolved(idx)
	if err := c.intents.maybeTruncate(c.log, c.cfg.TruncateEvery); errors.Is(err, wal.ErrNotTruncated) {
		c.lg.Warn("the WAL keeps its resolved history (no room to truncate it); free space on the data filesystem", "err", err)
	} else if err != nil {
		c.failStop(err)
	}
}

// proposal says what propose does after an error other than the leader's refusal.
type proposal bool

const (
	// once: the error is returned; the caller settles the command later (resolveLater,
	// recovery at the next start-up) or reports it.
	once proposal = false
	// untilKnown: the command is proposed again, with backoff (commitRetryFirst to
	// commitRetryMax), until its outcome is known, the leader refuses it (ErrRefused), or
	// CommitTimeout has passed. For a COMMIT: the FSM de-duplicates it by txn ID, so a leader
	// change between attempts (an indeterminate outcome, a dead leader) costs a retry, not a
	// second commit.
	untilKnown proposal = true
)

// The backoff between the proposals of an untilKnown command.
const (
	commitRetryFirst = 20 * time.Millisecond
	commitRetryMax   = time.Second
)

// The backoff between the attempts of onResolved to learn a transaction's final result.
const (
	resolveRetryFirst = 50 * time.Millisecond
	resolveRetryMax   = 2 * time.Second
)

// newBackOff is the coordinator's retry backoff: first, doubling up to most, without jitter.
func newBackOff(first, most time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: first, RandomizationFactor: 0, Multiplier: 2, MaxInterval: most}
}

// propose proposes cmd, the whole bounded by CommitTimeout: once, or untilKnown (which also
// stops when the coordinator closes).
func (c *Coordinator) propose(ctx context.Context, cmd []byte, p proposal) (*fsm.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CommitTimeout)
	defer cancel()
	b := newBackOff(commitRetryFirst, commitRetryMax)
	for {
		res, err := c.meta.Propose(ctx, cmd)
		if err == nil || p == once || errors.Is(err, ErrRefused) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-c.bgCtx.Done():
			return nil, err
		case <-time.After(b.NextBackOff()):
			c.lg.Debug("retrying an indeterminate commit", "err", err)
		}
	}
}

// resolveLater settles a transaction whose COMMIT or ABORT had an indeterminate outcome:
// after a Barrier the FSM either knows the transaction, or an ABORT is proposed; the FSM keeps
// whichever of COMMIT and ABORT came first.
func (c *Coordinator) resolveLater(id fsm.TxnID, idx uint64, ws []*write) {
	c.onResolved(id, func(res *fsm.Result) { c.settle(id, idx, ws, res, kvoffload.CodeAborted, "indeterminate commit") })
}

// onResolved calls fn, in the background, with the final result of transaction id (see
// resolve), retrying with backoff until there is one. If the coordinator closes first, fn is
// never called: recovery at the next start-up resolves what is left.
func (c *Coordinator) onResolved(id fsm.TxnID, fn func(*fsm.Result)) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		b := newBackOff(resolveRetryFirst, resolveRetryMax)
		for {
			if res, err := c.resolve(c.bgCtx, id); err == nil {
				fn(res)
				return
			}
			select {
			case <-c.bgCtx.Done():
				return
			case <-time.After(b.NextBackOff()):
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
	return c.propose(ctx, fsm.EncodeAbort(fsm.Abort{TxnID: id, Node: c.cfg.NodeID, Reason: "indeterminate commit"}), once)
}
