package node

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// streamIdleTimeout is the longest an offload stream may go without a message. A stream
// that announces objects and then stops sending would otherwise hold its share of the
// buffer budget (budget.go) for as long as its client keeps the connection open, and a few
// thousand such streams would hold all of it (adversarial review). A client streams
// values it already has, so a live client is never this slow.
const streamIdleTimeout = 30 * time.Second

// idleRecv wraps a stream's Recv so that a call returns DeadlineExceeded when no message
// arrives within idle. The messages are received by one goroutine that ends with the
// stream (ctx): the handler may return while a Recv is pending, and gRPC then cancels it.
func idleRecv[T any](ctx context.Context, recv func() (*T, error), idle time.Duration) func() (*T, error) {
	type result struct {
		msg *T
		err error
	}
	out := make(chan result)
	go func() {
		for {
			m, err := recv()
			select {
			case out <- result{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(idle)
	return func() (*T, error) {
		timer.Reset(idle)
		select {
		case r := <-out:
			return r.msg, r.err
		case <-timer.C:
			return nil, status.Errorf(codes.DeadlineExceeded, "no message from the client for %s (the idle limit of an offload stream)", idle)
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}
