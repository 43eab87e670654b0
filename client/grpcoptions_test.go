package client_test

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	"github.com/kvoffload/kvoffload"
)

// Options.GRPCOptions reach the connections: an interceptor given there sees the calls.
func TestGRPCOptionsPassThrough(t *testing.T) {
	m := mustStartNode(t, newFake())
	var unary, stream atomic.Int64
	opt := testOptions()
	opt.GRPCOptions = []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			unary.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			stream.Add(1)
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
	c := mustDial(t, opt, m.addr)
	defer c.Close()
	ctx := testCtx(t)
	if _, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "k", Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	if unary.Load() == 0 || stream.Load() == 0 {
		t.Fatalf("interceptors saw %d unary and %d stream calls, want both > 0", unary.Load(), stream.Load())
	}
}
