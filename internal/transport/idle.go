package transport

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// IdleRecv wraps a stream's Recv so that a call returns DeadlineExceeded when no message
// arrives within idle. The messages are received by one goroutine that ends with the
// stream (ctx): the handler may return while a Recv is pending, and gRPC then cancels it.
func IdleRecv[T any](ctx context.Context, recv func() (*T, error), idle time.Duration) func() (*T, error) {
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

// IdleSend wraps a stream's Send so that a call returns DeadlineExceeded when the message is
// not taken within idle (the client reads nothing and the stream's flow-control window is
// full). The messages are sent by one goroutine that ends with the stream (ctx): the handler
// returns while a Send is pending, and gRPC then resets the stream, which ends the Send.
func IdleSend[T any](ctx context.Context, send func(*T) error, idle time.Duration) func(*T) error {
	in := make(chan *T)
	out := make(chan error)
	go func() {
		for {
			select {
			case m := <-in:
				err := send(m)
				select {
				case out <- err:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	timer := time.NewTimer(idle)
	return func(m *T) error {
		timer.Reset(idle)
		select {
		case in <- m:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
		select {
		case err := <-out:
			return err
		case <-timer.C:
			return status.Errorf(codes.DeadlineExceeded, "the client took no message for %s (the idle limit of a read stream)", idle)
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}
