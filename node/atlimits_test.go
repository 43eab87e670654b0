package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/internal/wire"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/vfs/memfs"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// limitKeys returns lim.MaxBatchKeys distinct keys of exactly lim.MaxKeyBytes bytes.
func limitKeys(lim txn.Config, prefix string) []string {
	keys := make([]string, lim.MaxBatchKeys)
	for i := range keys {
		k := fmt.Sprintf("m@limits@%s@%05d@", prefix, i)
		keys[i] = k + strings.Repeat("k", lim.MaxKeyBytes-len(k))
	}
	return keys
}

// limitObjects gives keys values that total exactly lim.MaxBatchBytes, the first of
// lim.MaxObjectBytes and the others of equal size (the remainder on the last).
func limitObjects(lim txn.Config, seed uint64, keys []string) []kvoffload.Object {
	rest := lim.MaxBatchBytes - lim.MaxObjectBytes
	each := rest / int64(len(keys)-1)
	objs := make([]kvoffload.Object, len(keys))
	for i, k := range keys {
		size := each
		switch i {
		case 0:
			size = lim.MaxObjectBytes
		case len(keys) - 1:
			size = rest - each*int64(len(keys)-2)
		}
		objs[i] = kvoffload.Object{Key: k, Value: trace.Payload(seed, k, int(size))}
	}
	return objs
}

// checkAtLimits runs every Store call on objs (a batch at the limits) through st and checks
// each answers every key: the offload stores them all, its retry under the same txn ID
// answers the same, BatchExists finds them, BatchGet and BatchGetInto read them back, and
// Remove removes them.
func checkAtLimits(t *testing.T, st kvoffload.Store, objs []kvoffload.Object) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keys := make([]string, len(objs))
	bufs := make([][]byte, len(objs))
	for i, o := range objs {
		keys[i], bufs[i] = o.Key, make([]byte, len(o.Value))
	}
	id := kvoffload.NewTxnID()
	for _, call := range []string{"BatchOffload", "BatchOffload again with its txn ID"} {
		res, err := st.BatchOffload(ctx, id, objs)
		if err != nil {
			t.Fatalf("%s: %v", call, err)
		}
		checkStored(t, call, res, len(objs))
	}
	ex, err := st.BatchExists(ctx, keys, time.Second)
	if err != nil {
		t.Fatalf("BatchExists: %v", err)
	}
	checkCount(t, "BatchExists", len(ex.Keys), len(keys))
	if ex.PrefixPresent != len(keys) {
		t.Fatalf("BatchExists: %d leading keys present of %d (%s)", ex.PrefixPresent, len(keys), ex.Reason)
	}
	got, err := st.BatchGet(ctx, keys)
	if err != nil {
		t.Fatalf("BatchGet: %v", err)
	}
	checkFound(t, "BatchGet", got, objs)
	got, err = st.BatchGetInto(ctx, keys, bufs)
	if err != nil {
		t.Fatalf("BatchGetInto: %v", err)
	}
	checkFound(t, "BatchGetInto", got, objs)
	rm, err := st.Remove(ctx, keys)
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	checkRemoved(t, "Remove", rm, len(keys))
}

func checkCount(t *testing.T, call string, got, want int) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: %d results for %d keys", call, got, want)
	}
}

// checkStored asserts res answers n keys, every one Stored.
func checkStored(t *testing.T, call string, res []kvoffload.KeyResult, n int) {
	t.Helper()
	checkCount(t, call, len(res), n)
	for i, r := range res {
		if r.Outcome != kvoffload.Stored {
			t.Fatalf("%s: key %d: %s %s", call, i, r.Outcome, r.Reason)
		}
	}
}

// checkRemoved asserts res answers n keys, every one Removed.
func checkRemoved(t *testing.T, call string, res []kvoffload.RemoveResult, n int) {
	t.Helper()
	checkCount(t, call, len(res), n)
	for i, r := range res {
		if !r.Removed {
			t.Fatalf("%s: key %d not removed", call, i)
		}
	}
}

// checkFound asserts every read result is Found with its object's bytes.
func checkFound(t *testing.T, call string, got []kvoffload.GetResult, objs []kvoffload.Object) {
	t.Helper()
	checkCount(t, call, len(got), len(objs))
	for i, g := range got {
		if g.Status != kvoffload.Found || !bytes.Equal(g.Value, objs[i].Value) {
			t.Fatalf("%s: key %d: %s %s (%d bytes, want %d)", call, i, g.Status, g.Reason, len(g.Value), len(objs[i].Value))
		}
	}
}

// checkRegionAtLimits runs the zero-copy calls on a batch at the limits through c, a client
// of a local socket: OffloadFrom and GetInto, MaxBatchKeys descriptors of one region.
func checkRegionAtLimits(t *testing.T, c *client.Client, objs []kvoffload.Object) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	total := 0
	for _, o := range objs {
		total += len(o.Value)
	}
	r, err := c.NewRegion(total)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	descs := make([]client.Desc, len(objs))
	off := 0
	for i, o := range objs {
		descs[i] = client.Desc{Key: o.Key, Offset: off, Length: len(o.Value)}
		off += copy(r.Bytes()[off:], o.Value)
	}
	res, err := c.OffloadFrom(ctx, kvoffload.NewTxnID(), r, descs)
	if err != nil {
		t.Fatalf("OffloadFrom: %v", err)
	}
	checkStored(t, "OffloadFrom", res, len(objs))
	clear(r.Bytes())
	got, err := c.GetInto(ctx, r, descs)
	if err != nil {
		t.Fatalf("GetInto: %v", err)
	}
	checkFound(t, "GetInto", got, objs)
}

// TestEveryLimitAtItsValue: a batch of exactly MaxBatchKeys keys of MaxKeyBytes bytes each,
// whose values total MaxBatchBytes with one of MaxObjectBytes, is answered key by key by
// every call of the client API: over TCP (with the client's precheck and without) and over
// the local socket (the shared-memory calls, and gRPC for BatchGet, whose values do not fit
// a staging region, and the other calls).
func TestEveryLimitAtItsValue(t *testing.T) {
	seed := testkit.Seed(t)
	cfg := testConfig(t.TempDir())
	cfg.FS = memfs.New()
	cfg.APIAddr = "127.0.0.1:0"
	cfg.Local.Socket = localSocketPath(t)
	cfg.Txn.MaxObjectBytes = 2*wire.ChunkBytes + 1 // three chunks
	cfg.Txn.MaxBatchBytes = cfg.Txn.MaxObjectBytes + int64(cfg.Txn.MaxBatchKeys-1)*64
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	lim := cfg.Txn
	dial := func(opt client.Options, addr string) *client.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := client.DialOptions(ctx, opt, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	local := dial(client.Options{}, "unix://"+n.LocalSocket())
	for _, tc := range []struct {
		name string
		st   kvoffload.Store
	}{
		{"tcp", dial(client.Options{}, n.APIAddr())},
		{"tcp-noprecheck", dial(client.Options{NoPrecheck: true}, n.APIAddr())},
		{"unix", local},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkAtLimits(t, tc.st, limitObjects(lim, seed, limitKeys(lim, tc.name)))
		})
	}
	t.Run("unix-region", func(t *testing.T) {
		checkRegionAtLimits(t, local, limitObjects(lim, seed, limitKeys(lim, "region")))
	})
}

// TestEveryLimitAtItsValueForwarded: a batch of MaxBatchKeys keys of MaxKeyBytes bytes
// crosses the peer connections of a 3-node cluster: offloaded through a follower (its
// proposal and the result go through the leader's Propose), read through the other members
// (the owner's ReadLocal) and removed through the other follower (Propose again).
func TestEveryLimitAtItsValueForwarded(t *testing.T) {
	nodes := openCluster(t, 3)
	leader := leaderOf(t, nodes...)
	var followers []*Node
	for _, nd := range nodes {
		if nd != leader {
			followers = append(followers, nd)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lim := followers[0].cfg.Txn
	objs := objects(testkit.Seed(t), 64, limitKeys(lim, "fwd")...)
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	// A leadership change under the batch (a loaded machine) leaves its outcome unknown: it is
	// sent again with the same txn ID, as a client does, and answers the original results.
	id := kvoffload.NewTxnID()
	res, err := followers[0].BatchOffload(ctx, id, objs)
	for try := 0; try < 10 && (errors.Is(err, kvoffload.ErrIndeterminate) || errors.Is(err, kvoffload.ErrUnavailable)); try++ {
		t.Logf("BatchOffload through a follower, sent again: %v", err)
		time.Sleep(100 * time.Millisecond)
		res, err = followers[0].BatchOffload(ctx, id, objs)
	}
	if err != nil {
		t.Fatalf("BatchOffload through a follower: %v", err)
	}
	checkStored(t, "BatchOffload through a follower", res, len(objs))
	for _, nd := range []*Node{leader, followers[1]} {
		waitApplied(t, nd, followers[0])
		got, err := nd.BatchGet(ctx, keys)
		if err != nil {
			t.Fatalf("BatchGet through %s: %v", nd.cfg.ID, err)
		}
		checkFound(t, "BatchGet through "+nd.cfg.ID, got, objs)
	}
	rm, err := followers[1].Remove(ctx, keys)
	if errors.Is(err, kvoffload.ErrUnavailable) {
		// A leadership change under the removal (a loaded machine): its outcome is unknown,
		// and a Remove is safe to send again. What must hold is that every key is gone.
		t.Logf("Remove through a follower, retried: %v", err)
		testkit.Eventually(t, 30*time.Second, "a retried Remove through a follower", func() bool {
			_, err = followers[1].Remove(ctx, keys)
			return err == nil
		})
		got, err := followers[1].BatchGet(ctx, keys)
		if err != nil {
			t.Fatalf("BatchGet after the retried Remove: %v", err)
		}
		for i, g := range got {
			if g.Status != kvoffload.NotFound {
				t.Fatalf("key %d after the retried Remove: %s %s", i, g.Status, g.Reason)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("Remove through a follower: %v", err)
	}
	checkRemoved(t, "Remove through a follower", rm, len(keys))
}

// TestOverlongKeysRefusedWhole: a batch whose keys hold more than MaxBatchKeys x MaxKeyBytes
// bytes in all (MaxBatchKeys keys, one of them a byte too long) is refused whole with
// ErrTooLarge and stores nothing, on the embedded node and over TCP: its answer, which names
// every key, would not fit the message limit, so the node must not commit it.
func TestOverlongKeysRefusedWhole(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FS = memfs.New()
	cfg.APIAddr = "127.0.0.1:0"
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.DialOptions(ctx, client.Options{NoPrecheck: true}, n.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name string
		st   kvoffload.Store
	}{{"embedded", n}, {"tcp", c}} {
		name, st := tc.name, tc.st
		keys := limitKeys(cfg.Txn, name)
		keys[len(keys)-1] += "k"
		res, err := st.BatchOffload(ctx, kvoffload.NewTxnID(), objects(1, 16, keys...))
		if !errors.Is(err, kvoffload.ErrTooLarge) || !strings.Contains(err.Error(), "exceeds MaxBatchKeys x MaxKeyBytes") {
			t.Fatalf("%s: %d results, err %v; want ErrTooLarge naming MaxBatchKeys x MaxKeyBytes", name, len(res), err)
		}
		if got := n.FSM().Stats().Keys; got != 0 {
			t.Fatalf("%s: %d keys stored by a refused batch", name, got)
		}
	}
}
