package client_test

import (
	"bytes"
	"context"
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized tests (0: derived from the clock)")

// testSeed returns the seed of a randomized test and logs it: rerun with -seed to reproduce.
func testSeed(t *testing.T) *rand.Rand {
	t.Helper()
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (reproduce with -seed=%d)", s, s)
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

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
	if err != nil {
		t.Fatal(err)
	}
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
