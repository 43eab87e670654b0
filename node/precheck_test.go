package node

import (
	"context"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// TestPrecheckUploadsOnlyNeeded: over the TCP API and the local socket, a BatchOffload
// uploads only the keys the node does not hold with the same size and checksum (counted by
// the Stats counter payload_bytes_received); a changed value is uploaded (and is a
// Conflict); NoPrecheck uploads everything and still reads AlreadyStored.
func TestPrecheckUploadsOnlyNeeded(t *testing.T) {
	seed := testkit.Seed(t)
	cfg := testConfig(t.TempDir())
	cfg.APIAddr = "127.0.0.1:0"
	cfg.Local.Socket = localSocketPath(t)
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	ctx := context.Background()
	received := func() uint64 {
		st, err := n.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Counters["payload_bytes_received"]
	}
	const size = 100 << 10
	dial := func(opt client.Options, addr string) *client.Client {
		c, err := client.DialOptions(ctx, opt, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	for _, c := range []*client.Client{dial(client.Options{}, n.APIAddr()), dial(client.Options{}, "unix://"+n.LocalSocket())} {
		prefix := c.Addr()
		old := objects(seed, size, keyOf(prefix, 0), keyOf(prefix, 1), keyOf(prefix, 2), keyOf(prefix, 3))
		offload := func(objs []kvoffload.Object) []kvoffload.KeyResult {
			t.Helper()
			res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), objs)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		before := received()
		offload(old)
		if got := received() - before; got != 4*size {
			t.Fatalf("%s: cold batch brought %d bytes, want %d", prefix, got, 4*size)
		}
		before = received()
		fresh := objects(seed, size, keyOf(prefix, 4), keyOf(prefix, 5))
		changed := kvoffload.Object{Key: old[3].Key, Value: append([]byte{1}, old[3].Value[1:]...)}
		res := offload(append(append([]kvoffload.Object{old[0], old[1]}, fresh...), changed))
		want := []kvoffload.Outcome{kvoffload.AlreadyStored, kvoffload.AlreadyStored, kvoffload.Stored, kvoffload.Stored, kvoffload.Conflict}
		for i, r := range res {
			if r.Outcome != want[i] {
				t.Fatalf("%s: key %d: %s %s, want %s", prefix, i, r.Outcome, r.Reason, want[i])
			}
		}
		if got := received() - before; got != 3*size {
			t.Fatalf("%s: mixed batch brought %d bytes, want %d (two new, one changed)", prefix, got, 3*size)
		}
	}
	nc := dial(client.Options{NoPrecheck: true}, n.APIAddr())
	before := received()
	old := objects(seed, size, keyOf(n.APIAddr(), 0))
	res, err := nc.BatchOffload(ctx, kvoffload.NewTxnID(), old)
	if err != nil || res[0].Outcome != kvoffload.AlreadyStored || received()-before != size {
		t.Fatalf("NoPrecheck: %v %+v, %d bytes", err, res, received()-before)
	}
}
