package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// A member back after an outage is reached again within the client's MaxBackoff, not after
// gRPC's own reconnection backoff, which grows to two minutes (a replay against a restarted
// node would stall that long).
func TestReconnectWithinMaxBackoff(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	opt := testOptions() // MaxBackoff 50 ms
	c := mustDial(t, opt, n.addr)
	defer c.Close()
	if _, err := c.Stats(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.srv.Stop()
	// Down for 3 s, called now and then: by gRPC's default the reconnection attempts come
	// 1 and 2.6 s after the first failure, and the next one 5.2 s after it.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, _ = c.Stats(ctx)
		cancel()
	}
	lis, err := net.Listen("tcp", n.addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", n.addr, err)
	}
	srv := grpc.NewServer()
	kvoffloadv1.RegisterKVOffloadServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := c.Stats(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Since(start) > time.Second {
			t.Fatalf("the member is still unreached %s after it came back: %v", time.Since(start), err)
		}
	}
	t.Logf("reached again %s after the member came back", time.Since(start).Round(time.Millisecond))
}
