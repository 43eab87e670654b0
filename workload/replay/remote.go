package replay

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn"
)

// Remote drives a running cluster through the client for replay: it converts the
// replay's txn/fsm types to the client's and back. Each call is bounded by CallTimeout, so a
// cluster that stays down shows up as batch errors rather than a replay that never ends.
type Remote struct {
	Client      *client.Client
	CallTimeout time.Duration // bound on one call, retries included
}

var _ Target = Remote{}

func (r Remote) BatchOffload(ctx context.Context, id fsm.TxnID, objs []txn.Object) ([]txn.KeyResult, error) {
	in := make([]client.Object, len(objs))
	for i, o := range objs {
		in[i] = client.Object{Key: o.Key, Value: o.Value}
	}
	ctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	res, err := r.Client.BatchOffload(ctx, client.TxnID(id), in)
	if err != nil {
		return nil, err
	}
	out := make([]txn.KeyResult, len(res))
	for i, k := range res {
		out[i] = txn.KeyResult{Key: k.Key, Outcome: txnOutcome(k.Outcome), Joined: k.Joined, Reason: k.Reason}
	}
	return out, nil
}

func (r Remote) BatchGet(ctx context.Context, keys []string) ([]txn.GetResult, error) {
	ctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	res, err := r.Client.BatchGet(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := make([]txn.GetResult, len(res))
	for i, g := range res {
		out[i] = txn.GetResult{Key: g.Key, Status: txnGetStatus(g.Status), Value: g.Value, Reason: g.Reason}
	}
	return out, nil
}

func txnOutcome(o client.Outcome) txn.Outcome {
	switch o {
	case client.Stored:
		return txn.Stored
	case client.AlreadyStored:
		return txn.AlreadyStored
	case client.Conflict:
		return txn.Conflict
	case client.Rejected:
		return txn.Rejected
	}
	return txn.Failed
}

func txnGetStatus(s client.GetStatus) txn.GetStatus {
	switch s {
	case client.Found:
		return txn.Found
	case client.NotFound:
		return txn.NotFound
	case client.Corrupt:
		return txn.Corrupt
	}
	return txn.Unavailable
}

// Spread sends each call to the next of its Targets in turn.
type Spread struct {
	Targets []Target
	next    atomic.Uint64
}

var _ Target = (*Spread)(nil)

func (s *Spread) pick() Target { return s.Targets[(s.next.Add(1)-1)%uint64(len(s.Targets))] }

// BatchOffload implements Target.
func (s *Spread) BatchOffload(ctx context.Context, id fsm.TxnID, objs []txn.Object) ([]txn.KeyResult, error) {
	return s.pick().BatchOffload(ctx, id, objs)
}

// BatchGet implements Target.
func (s *Spread) BatchGet(ctx context.Context, keys []string) ([]txn.GetResult, error) {
	return s.pick().BatchGet(ctx, keys)
}
