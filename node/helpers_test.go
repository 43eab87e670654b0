package node

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/workload/trace"
)

func testConfig(dir string) Config {
	cfg := DefaultConfig(dir)
	cfg.BucketSize = 8 << 20
	cfg.Txn.MaxObjectBytes = 4 << 20
	return cfg
}

func mustOpen(t *testing.T, cfg Config) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Open(ctx, cfg)
	testkit.Must(t, err, "open %s", cfg.DataDir)
	return n
}

func mustClose(t *testing.T, n *Node) {
	t.Helper()
	testkit.Must(t, n.Close(), "close")
}

func keyOf(prefix string, i int) string { return fmt.Sprintf("m@pcp0@dcp0@test:%s@%04d", prefix, i) }

func objects(seed uint64, size int, keys ...string) []kvoffload.Object {
	objs := make([]kvoffload.Object, len(keys))
	for i, k := range keys {
		objs[i] = kvoffload.Object{Key: k, Value: trace.Payload(seed, k, size)}
	}
	return objs
}

func mustOffload(t *testing.T, n *Node, objs []kvoffload.Object) []kvoffload.KeyResult {
	t.Helper()
	res, err := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objs)
	if err != nil {
		t.Fatalf("offload: %v", err)
	}
	for _, r := range res {
		if !r.Outcome.OK() {
			t.Fatalf("offload %s: %s %s", r.Key, r.Outcome, r.Reason)
		}
	}
	return res
}

// checkReadable asserts every key reads back with the payload derived from (seed, key, size).
func checkReadable(t *testing.T, n *Node, seed uint64, size int, keys ...string) {
	t.Helper()
	res, err := getAll(context.Background(), n, keys)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	for _, r := range res {
		if r.Status != kvoffload.Found {
			t.Fatalf("get %s: %s %s", r.Key, r.Status, r.Reason)
		}
		if !bytes.Equal(r.Value, trace.Payload(seed, r.Key, size)) {
			t.Fatalf("get %s: wrong bytes", r.Key)
		}
	}
}

// checkConsistent asserts the store's invariants at quiescence: every metadata entry reads back
// verified (I1), every record on disk is referenced by metadata (I4, after start-up
// collection), and live-byte accounting equals the sum of the referenced extents (I12).
func checkConsistent(t *testing.T, n *Node) {
	t.Helper()
	var keys []string
	var live int64
	entries := map[string]fsm.Entry{}
	n.FSM().ForEach(func(e fsm.Entry) bool {
		keys = append(keys, e.Key)
		entries[e.Key] = e
		live += e.Extent.Length
		return true
	})
	res, err := getAll(context.Background(), n, keys)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	for _, r := range res {
		if r.Status != kvoffload.Found {
			t.Errorf("I1: metadata without readable data: %s %s %s", r.Key, r.Status, r.Reason)
		}
	}
	st, err := n.Buckets().Stats()
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if st.LiveBytes != live {
		t.Errorf("I12: live bytes %d, metadata references %d", st.LiveBytes, live)
	}
	err = n.Buckets().Scan(func(ext bucketstore.Extent, h bucketstore.Header, err error) error {
		if err != nil {
			return nil // damaged regions are not records
		}
		e, ok := entries[h.Key]
		if !ok || e.Extent != ext {
			t.Errorf("I4: record of %q at %+v not referenced by metadata", h.Key, ext)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
}

// getAll reads keys in batches under the per-request key limit.
func getAll(ctx context.Context, n *Node, keys []string) ([]kvoffload.GetResult, error) {
	var out []kvoffload.GetResult
	for lo := 0; lo < len(keys); lo += 1024 {
		res, err := n.BatchGet(ctx, keys[lo:min(lo+1024, len(keys))])
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	return out, nil
}

// mustExists is a BatchExists answer, which on a live node never fails.
func mustExists(r kvoffload.ExistsResult, err error) kvoffload.ExistsResult {
	if err != nil {
		panic("BatchExists: " + err.Error())
	}
	return r
}
