package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/replay"
	"github.com/kvoffload/kvoffload/txn"
)

// remoteTarget drives a running cluster through the client for replay: it converts the
// replay's txn/fsm types to the client's and back. Each call is bounded by callTimeout, so a
// cluster that stays down shows up as batch errors rather than a replay that never ends.
type remoteTarget struct {
	c           *client.Client
	callTimeout time.Duration
}

// remoteCallTimeout bounds one batch offload or read of a replay, retries included.
const remoteCallTimeout = 2 * time.Minute

var _ replay.Target = remoteTarget{}

func (r remoteTarget) BatchOffload(ctx context.Context, id fsm.TxnID, objs []txn.Object) ([]txn.KeyResult, error) {
	in := make([]client.Object, len(objs))
	for i, o := range objs {
		in[i] = client.Object{Key: o.Key, Value: o.Value}
	}
	ctx, cancel := context.WithTimeout(ctx, r.callTimeout)
	defer cancel()
	res, err := r.c.BatchOffload(ctx, client.TxnID(id), in)
	if err != nil {
		return nil, err
	}
	out := make([]txn.KeyResult, len(res))
	for i, k := range res {
		out[i] = txn.KeyResult{Key: k.Key, Outcome: txnOutcome(k.Outcome), Joined: k.Joined, Reason: k.Reason}
	}
	return out, nil
}

func (r remoteTarget) BatchGet(ctx context.Context, keys []string) ([]txn.GetResult, error) {
	ctx, cancel := context.WithTimeout(ctx, r.callTimeout)
	defer cancel()
	res, err := r.c.BatchGet(ctx, keys)
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

// dialRemoteTimeout bounds connecting to the cluster before a replay starts.
const dialRemoteTimeout = 10 * time.Second

// dialRemote connects to a cluster for replay.
func dialRemote(ctx context.Context, addr string, verbose bool) (replay.Target, func(), error) {
	addrs := splitAddrs(addr)
	if len(addrs) == 0 {
		return nil, nil, errors.New("--addr is empty")
	}
	dctx, cancel := context.WithTimeout(ctx, dialRemoteTimeout)
	defer cancel()
	opt := client.DefaultOptions()
	opt.Logger = logger(verbose)
	c, err := client.DialOptions(dctx, opt, addrs...)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach the cluster at %s: %w", addr, err)
	}
	return remoteTarget{c: c, callTimeout: remoteCallTimeout}, func() { _ = c.Close() }, nil
}
