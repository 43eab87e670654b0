package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// retryable reports whether err leaves the call's outcome unknown, so that the same request
// (with the same transaction ID) should be sent again to the next member. The caller has
// already checked that its context is still live, so DeadlineExceeded and Canceled here are
// the member's (or the stall watch's).
func retryable(err error) bool {
	if errors.Is(err, errStreamEnded) || errors.Is(err, wire.ErrStreamEnded) || errors.Is(err, errStalled) {
		return true
	}
	s, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch s.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Canceled:
		return true
	case codes.Unknown, codes.Internal:
		return !unsendable(s)
	case codes.FailedPrecondition:
		return leaderChange(s)
	}
	return false
}

// unsendable reports the status gRPC gives a request it could not encode (rpc_util.go in
// google.golang.org/grpc: "grpc: error while marshaling"): nothing of it left the client, so
// a retry fails the same way.
func unsendable(s *status.Status) bool {
	return s.Code() == codes.Internal && strings.HasPrefix(s.Message(), "grpc: error while marshaling")
}

// leaderChange reports a FailedPrecondition that says the member was not (or no longer) the
// leader (raftmeta.ErrNotLeader, "raftmeta: not the leader", as internal/cluster/service.go maps
// it): another member, or the same one later, may accept the request.
func leaderChange(s *status.Status) bool {
	return strings.Contains(s.Message(), "not the leader")
}

// permanent wraps an error whose outcome is known (the member refused the request, or the
// client could not send it) with the sentinel that names its class.
func permanent(name string, err error) error {
	s, ok := status.FromError(err)
	if !ok {
		return err // the client's own error, already named
	}
	if unsendable(s) {
		return fmt.Errorf("%w: %s: %w", kvoffload.ErrInvalidArgument, name, err)
	}
	switch s.Code() {
	case codes.InvalidArgument, codes.FailedPrecondition:
		return fmt.Errorf("%w: %s: %w", kvoffload.ErrInvalidArgument, name, err)
	case codes.ResourceExhausted:
		return fmt.Errorf("%w: %s: %w", kvoffload.ErrTooLarge, name, err)
	case codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("%w: %s: %w", kvoffload.ErrDenied, name, err)
	}
	return fmt.Errorf("%w: %s: %w", kvoffload.ErrUnavailable, name, err)
}

// retryBackoff is the wait between attempts on different members: from Options.RetryBackoff,
// doubling up to Options.MaxBackoff, each wait spread by ±25% so that clients that lost the
// same member do not retry in step. Reset it once an attempt made progress.
func (c *Client) retryBackoff() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     c.opt.RetryBackoff,
		RandomizationFactor: 0.25,
		Multiplier:          2,
		MaxInterval:         c.opt.MaxBackoff,
	}
}

// failover moves calls from member i to the next one, unless another call already did.
func (c *Client) failover(i int) {
	next := (i + 1) % len(c.members)
	if c.cur.CompareAndSwap(int64(i), int64(next)) && next != i {
		c.lg.Debug("failover", "from", c.members[i].addr, "to", c.members[next].addr)
	}
}

// errStreamEnded is an attempt's error when a stream ended before the reply was complete:
// the outcome is unknown and the call is retried.
var errStreamEnded = errors.New("client: stream ended early")

// errRenew asks retry to run the operation again at once, on the same member (the operation
// has switched to a fresh transaction ID).
var errRenew = errors.New("client: renew transaction")

// retry runs op against the current member until it succeeds, fails with an error whose
// outcome is known, or ctx ends (or Options.MaxAttempts is spent). Errors whose outcome is
// unknown move the call to the next member after a backoff. Giving up wraps
// kvoffload.ErrIndeterminate for an offload (offload true: its batch may have been stored)
// and kvoffload.ErrUnavailable for any other call.
//
// Each attempt runs under a stall watch (stall.go): one that makes no progress for
// Options.StallTimeout is cancelled and counts as an unknown outcome.
func (c *Client) retry(ctx context.Context, name string, offload bool, op func(ctx context.Context, a *attempt) error) error {
	delay := c.retryBackoff()
	var last error     // the last error that left the outcome unknown
	var refused []bool // the members that refused this call (wire.Refusal)
	var refusal error  // the last refusal
	for attempt := 1; ; attempt++ {
		if c.closed.Load() {
			return fmt.Errorf("%w: %s", kvoffload.ErrClosed, name)
		}
		if err := ctx.Err(); err != nil {
			if attempt == 1 { // nothing was sent
				return fmt.Errorf("%w: %s: %w", kvoffload.ErrUnavailable, name, err)
			}
			return giveUp(name, offload, err, last)
		}
		i := c.serving(refused)
		if i < 0 {
			return giveUpRefused(name, offload, refusal, last)
		}
		a, actx, stop := c.watch(ctx, c.members[i], attempt)
		began := time.Now()
		err := stop(op(actx, a))
		if c.opt.OnAttempt != nil {
			c.opt.OnAttempt(Attempt{Op: name, Addr: c.members[i].addr, N: attempt, Elapsed: time.Since(began), Err: err})
		}
		if err == nil {
			return nil
		}
		if errors.Is(err, errRenew) {
			continue
		}
		if ctx.Err() != nil {
			return giveUp(name, offload, ctx.Err(), err)
		}
		if reason := wire.RefusalReason(err); reason != "" {
			// Final for this member, and nothing of the call was done there: the next
			// member at once, without a backoff, or the refusal when none is left.
			refused = refusedBy(refused, i, len(c.members))
			refusal = fmt.Errorf("member %s %s: %w", c.members[i].addr, refusalText(reason), err)
			c.failover(i)
			continue
		}
		if !retryable(err) {
			return permanent(name, err)
		}
		last = err
		c.failover(i)
		if c.opt.MaxAttempts > 0 && attempt >= c.opt.MaxAttempts {
			return giveUp(name, offload, fmt.Errorf("gave up after %d attempts", attempt), last)
		}
		c.lg.Debug("retry", "op", name, "attempt", attempt, "addr", c.members[i].addr, "err", err)
		if err := sleep(ctx, delay.NextBackOff()); err != nil {
			return giveUp(name, offload, err, last)
		}
	}
}

// serving is the member the next attempt goes to: the current one, or the next after it
// that has not refused this call (refused[i]); -1 when every member has.
func (c *Client) serving(refused []bool) int {
	cur := int(c.cur.Load())
	for k := range c.members {
		if i := (cur + k) % len(c.members); refused == nil || !refused[i] {
			return i
		}
	}
	return -1
}

// refusedBy marks member i of n in refused, allocating it on the first refusal.
func refusedBy(refused []bool, i, n int) []bool {
	if refused == nil {
		refused = make([]bool, n)
	}
	refused[i] = true
	return refused
}

// refusalText says what a refusal's reason means for the operator.
func refusalText(reason string) string {
	switch reason {
	case wire.ReasonFailStopped:
		return "has fail-stopped (it serves nothing until its process is restarted)"
	case wire.ReasonRemoved:
		return "was removed from the cluster"
	}
	return "refuses every call (" + reason + ")"
}

// giveUpRefused builds the error of a call that every member refused (wire.Refusal): it was
// not done anywhere, so ErrUnavailable, unless an earlier attempt of an offload left its
// outcome unknown (last): then ErrIndeterminate.
func giveUpRefused(name string, offload bool, refusal, last error) error {
	if offload && last != nil {
		return fmt.Errorf("%w: %s: %w (an earlier attempt: %w)", kvoffload.ErrIndeterminate, name, refusal, last)
	}
	return fmt.Errorf("%w: %s: %w", kvoffload.ErrUnavailable, name, refusal)
}

// giveUp builds the error of a call that stopped retrying because of cause.
func giveUp(name string, offload bool, cause, last error) error {
	sentinel := kvoffload.ErrUnavailable
	if offload {
		sentinel = kvoffload.ErrIndeterminate
	}
	if last == nil {
		return fmt.Errorf("%w: %s: %w", sentinel, name, cause)
	}
	return fmt.Errorf("%w: %s: %w (last error: %w)", sentinel, name, cause, last)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// isEOF reports a Send that failed because the stream was torn down: the real status must
// then be fetched from the receiving side.
func isEOF(err error) bool { return errors.Is(err, io.EOF) }
