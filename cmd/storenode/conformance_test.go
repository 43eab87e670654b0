package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/freeport"
	"github.com/kvoffload/kvoffload/storetest"
)

// TestClientConformance: the Go client, against a real `storenode serve` (the command, run
// in this process on fresh ports and a fresh directory), passes the Store conformance suite
// that the embedded node and the fake pass.
func TestClientConformance(t *testing.T) {
	addrs := make([]string, 4)
	for i := range addrs {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = a
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := serveCmd()
	cmd.SetArgs([]string{"--id", "n1", "--data", t.TempDir(), "--raft-addr", addrs[0], "--api-addr", addrs[1],
		"--peer-addr", addrs[2], "--http-addr", addrs[3], "--log-level", "warn"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("serve: %v", err)
		}
	})

	var c *client.Client
	for deadline := time.Now().Add(30 * time.Second); ; {
		var err error
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		c, err = client.DialOptions(dctx, client.Options{}, addrs[1])
		dcancel()
		if err == nil {
			if _, err = c.Stats(ctx); err == nil {
				break
			}
			c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("storenode serve did not answer within 30 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer c.Close()
	storetest.Run(t, func(*testing.T) kvoffload.Store { return c })
}
