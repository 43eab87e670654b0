package client_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// testOptions retries fast so that failover tests take milliseconds.
func testOptions() client.Options {
	o := client.DefaultOptions()
	o.RetryBackoff = 5 * time.Millisecond
	o.MaxBackoff = 50 * time.Millisecond
	return o
}

func mustDial(t *testing.T, opt client.Options, addrs ...string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.DialOptions(ctx, opt, addrs...)
	testkit.Must(t, err, "DialOptions(%q)", addrs)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testCtx is a context that ends well before the test binary's timeout.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// checkRetriedOn checks that a one-object batch (key "k", value val) under txn id was Stored
// exactly, after two attempts that both carried id, and that the client now talks to addr.
func checkRetriedOn(t *testing.T, f *fakeCluster, c *client.Client, res []kvoffload.KeyResult, id kvoffload.TxnID, val []byte, addr string) {
	t.Helper()
	if res[0].Outcome != kvoffload.Stored || !bytes.Equal(f.val("k"), val) {
		t.Fatalf("%+v", res)
	}
	txns, _, _ := f.snapshot()
	if len(txns) != 2 || txns[0] != string(id[:]) || txns[1] != string(id[:]) {
		t.Fatalf("txn IDs %x, want twice %x", txns, id)
	}
	if c.Addr() != addr {
		t.Fatalf("client uses %s after the failover, want %s", c.Addr(), addr)
	}
}
