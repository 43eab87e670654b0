package txn

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/wal"
)

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
	res, err := c.propose(ctx, fsm.EncodeAbort(fsm.Abort{TxnID: p.id, Node: c.cfg.NodeID, Reason: reason}), once)
	if err != nil {
		c.fail(p, ws, kvoffload.CodeIO, reason)
		c.resolveLater(p.id, idx, ws)
		return
	}
	c.settle(p.id, idx, ws, res, kvoffload.CodeIO, reason)
	c.finish(p, ws)
}

// settle applies a transaction's final FSM result to its writes: outcomes are set, the
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
			w.outcome, w.code, w.reason = kvoffload.Rejected, kvoffload.CodeInvalidValue,
				"the value changed while it was being written (a value must not be modified during the call): "+w.err.Error()
		case res.Aborted:
			w.outcome, w.code, w.reason = kvoffload.Failed, abortCode, "aborted: "+abortReason
		case w.err != nil:
			w.outcome, w.code, w.reason = kvoffload.Failed, kvoffload.CodeIO, w.err.Error()
		case !ok:
			w.outcome, w.code, w.reason = kvoffload.Failed, kvoffload.CodeInternal, "key missing from the commit result"
		case ko.Outcome == fsm.OutcomeStored && ko.Entry.TxnID == id && ko.Entry.Owner == c.cfg.NodeID &&
			ko.Entry.Extent == w.ext:
			w.outcome, w.code, w.reason = kvoffload.Stored, kvoffload.CodeNone, ""
			continue
		default:
			w.outcome, w.code, w.reason = fromFSM(ko.Outcome)
		}
		if e, live := c.meta.Lookup(w.key); live && e.TxnID == id && e.Owner == c.cfg.NodeID && e.Extent == w.ext {
			// The metadata holds this write as committed though the result says otherwise: the
			// COMMIT applied and its result was pruned before this settle, which then proposed
			// an ABORT or re-proposed the COMMIT (AlreadyStored). The bytes are a live entry's:
			// keep them, or the key reads Corrupt, breaking G1
			// (TestResolverAfterPruneKeepsCommittedBytes).
			w.outcome, w.code, w.reason = kvoffload.Stored, kvoffload.CodeNone, ""
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
