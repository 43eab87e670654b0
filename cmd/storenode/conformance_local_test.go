package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/freeport"
	"github.com/kvoffload/kvoffload/storetest"
)

// TestClientConformanceLocal: the Go client on a `storenode serve --local-socket` (the
// shared-memory path, address unix://PATH) passes the Store conformance suite.
func TestClientConformanceLocal(t *testing.T) {
	sock, _, c := startLocalServe(t)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	storetest.Run(t, func(*testing.T) kvoffload.Store { return c })
}

// TestWarmReplayUploadsNothing: a second `replay --addr` of the same trace through the TCP API
// brings the node no payload bytes (the precheck answers every key AlreadyStored), while the
// first, through the local socket, brought every unique key's. (A warm replay through the
// local socket sends descriptors of its pool, which the node reads in place to compare.)
func TestWarmReplayUploadsNothing(t *testing.T) {
	sock, api, c := startLocalServe(t)
	received := func() uint64 {
		st, err := c.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.Counters["payload_bytes_received"]
	}
	replay := func(addr string) {
		cmd := replayCmd()
		cmd.SetArgs([]string{"--addr", addr, "--requests", "20", "--block-size", "64KiB", "--json"})
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("replay --addr %s: %v", addr, err)
		}
	}
	replay("unix://" + sock)
	cold := received()
	if cold == 0 {
		t.Fatal("the cold replay brought no payload bytes")
	}
	replay(api)
	if warm := received() - cold; warm != 0 {
		t.Fatalf("the warm replay brought %d payload bytes, want 0 (the cold one brought %d)", warm, cold)
	}
}

// startLocalServe runs `storenode serve --local-socket` in this process on fresh ports and a
// fresh directory, and returns the socket's path, the API address and a client on the socket.
func startLocalServe(t *testing.T) (string, string, *client.Client) {
	t.Helper()
	addrs := make([]string, 4)
	for i := range addrs {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = a
	}
	dir, err := os.MkdirTemp("", "kvl") // a short path: sun_path holds 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "local.sock")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := serveCmd()
	cmd.SetArgs([]string{"--id", "n1", "--data", t.TempDir(), "--raft-addr", addrs[0], "--api-addr", addrs[1],
		"--peer-addr", addrs[2], "--http-addr", addrs[3], "--local-socket", sock, "--log-level", "warn"})
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
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		c, err = client.DialOptions(dctx, client.Options{}, "unix://"+sock)
		dcancel()
		if err == nil {
			if _, err = c.Stats(ctx); err == nil {
				break
			}
			c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("storenode serve did not answer on %s within 30 s: %v", sock, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { _ = c.Close() })
	return sock, addrs[1], c
}
