package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// errStalled is an attempt's error when it made no progress for Options.StallTimeout: the
// member may be paused with the connection open, so the outcome is unknown and the call is
// retried on the next member, like Unavailable.
var errStalled = errors.New("client: member stalled")

// attempt is one try of a call on one member. Its watch (watch) cancels it when neither it
// nor its member has shown progress for Options.StallTimeout.
type attempt struct {
	c *Client
	m *member
	n int // 1 for the first attempt of a call
	// last is when the attempt last made progress, in nanoseconds since c.epoch.
	last atomic.Int64
}

func (c *Client) now() int64 { return int64(time.Since(c.epoch)) }

// sent records that the transport accepted a message for sending.
func (a *attempt) sent() { a.last.Store(a.c.now()) }

// received records a message from the member: progress, and a sign the member is alive.
func (a *attempt) received() {
	t := a.c.now()
	a.last.Store(t)
	a.m.heard.Store(t)
}

// watch starts attempt number n of a call on m, under a context that is cancelled with
// errStalled once the attempt has gone StallTimeout without progress. Progress is the
// attempt's own (sent, received) or any sign of life from the member: while the attempt is
// idle for half of StallTimeout, the member is probed with a gRPC health check, and any
// answer the member itself gives (Unimplemented included: the server need not register the
// health service) counts. So a member that waits long on its disk or on Raft keeps its
// calls, and one that is paused loses them. stop ends the watch and maps an error of a
// stalled attempt to errStalled.
func (c *Client) watch(ctx context.Context, m *member, n int) (a *attempt, actx context.Context, stop func(error) error) {
	a = &attempt{c: c, m: m, n: n}
	a.sent()
	actx, cancel := context.WithCancelCause(ctx)
	go a.guard(actx, cancel)
	stop = func(err error) error {
		cancel(nil)
		if err == nil || !errors.Is(context.Cause(actx), errStalled) || ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("%w: no progress from %s for %s (attempt ended with: %w)", errStalled, m.addr, c.opt.StallTimeout, err)
	}
	return a, actx, stop
}

// stallTicks is how many times per StallTimeout the watch looks at an attempt: a stall is
// found between StallTimeout and StallTimeout*(1+1/stallTicks) after the last progress.
const stallTicks = 8

// guard is the watch of one attempt; it returns when ctx ends.
func (a *attempt) guard(ctx context.Context, cancel context.CancelCauseFunc) {
	limit := a.c.opt.StallTimeout
	t := time.NewTicker(max(limit/stallTicks, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		idle := time.Duration(a.c.now() - max(a.last.Load(), a.m.heard.Load()))
		switch {
		case idle >= limit:
			cancel(errStalled)
			return
		case idle >= limit/2:
			a.c.probe(a.m)
		}
	}
}

// probe asks m whether it is alive, unless a probe is already in flight; an answer within
// half of StallTimeout updates m.heard.
func (c *Client) probe(m *member) {
	if !m.probing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer m.probing.Store(false)
		ctx, cancel := context.WithTimeout(c.bg, c.opt.StallTimeout/2)
		defer cancel()
		_, err := m.health.Check(ctx, &healthpb.HealthCheckRequest{})
		if answered(err) {
			m.heard.Store(c.now())
		}
	}()
}

// answered reports whether a probe's result came from the member rather than from the
// client's side of the connection (no connection, the probe's own deadline, Close).
func answered(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}
