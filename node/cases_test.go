package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/workload/replay"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// TestOffloadWarmRestart: committed keys are served again after a restart without
// re-offload (G6), and a second offload of them reports AlreadyStored.
func TestOffloadWarmRestart(t *testing.T) {
	dir := t.TempDir()
	n := mustOpen(t, testConfig(dir))
	keys := []string{keyOf("w", 0), keyOf("w", 1), keyOf("w", 2)}
	for _, r := range mustOffload(t, n, objects(1, 64<<10, keys...)) {
		if r.Outcome != kvoffload.Stored {
			t.Fatalf("%s: %s, want Stored", r.Key, r.Outcome)
		}
	}
	mustClose(t, n)
	n = mustOpen(t, testConfig(dir))
	defer mustClose(t, n)
	checkReadable(t, n, 1, 64<<10, keys...)
	for _, r := range mustOffload(t, n, objects(1, 64<<10, keys...)) {
		if r.Outcome != kvoffload.AlreadyStored {
			t.Fatalf("%s: %s after restart, want AlreadyStored", r.Key, r.Outcome)
		}
	}
	checkConsistent(t, n)
}

// TestC1DuplicateKeys is docs/cases.md C1 (Mooncake #2827, #3478): the same key twice in one batch
// and in a concurrent batch is a success for every caller, is written to disk once, and never
// fails its sibling keys.
func TestC1DuplicateKeys(t *testing.T) {
	n := mustOpen(t, testConfig(t.TempDir()))
	defer mustClose(t, n)
	const size = 128 << 10
	for round := range 10 {
		k := func(i int) string { return keyOf(fmt.Sprintf("c1r%d", round), i) }
		a := objects(1, size, k(0), k(1), k(2), k(3), k(4), k(3), k(6), k(7))
		b := objects(1, size, k(3), k(100), k(101), k(102))
		var ra, rb []kvoffload.KeyResult
		var ea, eb error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ra, ea = n.BatchOffload(context.Background(), kvoffload.NewTxnID(), a) }()
		go func() { defer wg.Done(); rb, eb = n.BatchOffload(context.Background(), kvoffload.NewTxnID(), b) }()
		wg.Wait()
		if ea != nil || eb != nil {
			t.Fatalf("round %d: batch errors %v, %v", round, ea, eb)
		}
		for _, r := range append(ra, rb...) {
			if !r.Outcome.OK() {
				t.Fatalf("round %d: %s: %s %s", round, r.Key, r.Outcome, r.Reason)
			}
		}
		checkReadable(t, n, 1, size, k(0), k(1), k(2), k(3), k(4), k(6), k(7), k(100), k(101), k(102))
		if c := recordsOnDisk(t, n, k(3)); c != 1 {
			t.Fatalf("round %d: k3 has %d records on disk, want 1", round, c)
		}
	}
	if got := n.FSM().Stats().Keys; got != 10*10 {
		t.Fatalf("metadata holds %d keys, want 100", got)
	}
	checkConsistent(t, n)
}

func recordsOnDisk(t *testing.T, n *Node, key string) int {
	t.Helper()
	count := 0
	err := n.Buckets().Scan(func(_ bucketstore.Extent, h bucketstore.Header, err error) error {
		if err == nil && h.Key == key {
			count++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return count
}

// TestC2SharedPrefixLoad is docs/cases.md C2: 32 concurrent writers replay requests that share
// prefix blocks (32 requests of 50,000 tokens in 128-token blocks, the first 60% shared).
// No batch fails because of a duplicate and every key is readable afterwards.
func TestC2SharedPrefixLoad(t *testing.T) {
	n := mustOpen(t, testConfig(t.TempDir()))
	defer mustClose(t, n)
	const blocks, shared = 50000 / 128, 50000 / 128 * 6 / 10
	reqs := make([]trace.Request, 32)
	for r := range reqs {
		for b := range blocks {
			id := int64(b)
			if b >= shared {
				id = int64(1_000_000*(r+1) + b)
			}
			reqs[r].HashIDs = append(reqs[r].HashIDs, id)
		}
	}
	sum, err := replay.Run(context.Background(), n, reqs, replay.Options{Writers: 32, BlockSize: 16 << 10, Model: "c2", Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("C2: %d keys, %d unique, stored %d, already stored %d (joined in flight %d)",
		sum.Keys, sum.UniqueKeys, sum.Stored, sum.AlreadyStored, sum.Joined)
	if sum.Failed+sum.Rejected+sum.Conflict+sum.BatchErrors != 0 {
		t.Fatalf("failures: %+v", sum)
	}
	if sum.Missing+sum.Corrupt != 0 || sum.Stored != sum.UniqueKeys {
		t.Fatalf("missing %d corrupt %d stored %d unique %d (%s)", sum.Missing, sum.Corrupt, sum.Stored, sum.UniqueKeys, sum.FirstProblem)
	}
	if sum.AlreadyStored != sum.Keys-sum.UniqueKeys {
		t.Fatalf("already stored %d, want %d", sum.AlreadyStored, sum.Keys-sum.UniqueKeys)
	}
	checkConsistent(t, n)
}

// TestC2MooncakeTrace replays the shipped Mooncake conversation sample with 32 writers.
func TestC2MooncakeTrace(t *testing.T) {
	n := mustOpen(t, testConfig(t.TempDir()))
	defer mustClose(t, n)
	reqs := trace.Sample()[:120]
	sum, err := replay.Run(context.Background(), n, reqs, replay.Options{Writers: 32, BlockSize: 8 << 10, Model: "mc", Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("trace: %d keys, %d unique, stored %d, already stored %d (joined %d)", sum.Keys, sum.UniqueKeys, sum.Stored, sum.AlreadyStored, sum.Joined)
	if sum.Missing+sum.Corrupt+sum.Failed+sum.BatchErrors != 0 || sum.Stored != sum.UniqueKeys {
		t.Fatalf("summary %+v", sum)
	}
}

// TestRetrySameTxnID: a retry with the same txn ID returns the original results.
func TestRetrySameTxnID(t *testing.T) {
	n := mustOpen(t, testConfig(t.TempDir()))
	defer mustClose(t, n)
	id := kvoffload.NewTxnID()
	objs := objects(1, 4096, keyOf("r", 0), keyOf("r", 1))
	first, err := n.BatchOffload(context.Background(), id, objs)
	if err != nil {
		t.Fatal(err)
	}
	again, err := n.BatchOffload(context.Background(), id, objs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].Outcome != kvoffload.Stored || again[i].Outcome != kvoffload.Stored {
			t.Fatalf("%s: first %s, retry %s; want Stored both", first[i].Key, first[i].Outcome, again[i].Outcome)
		}
	}
	if c := recordsOnDisk(t, n, keyOf("r", 0)); c != 1 {
		t.Fatalf("%d records on disk after retry, want 1", c)
	}
}

// TestBadInputPerKey: invalid keys and values are rejected per key with a reason; their
// siblings are stored; a batch over the limits is refused whole.
func TestBadInputPerKey(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Txn.MaxKeyBytes, cfg.Txn.MaxBatchKeys = 64, 8
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	good := keyOf("ok", 1)
	objs := []kvoffload.Object{
		{Key: "", Value: []byte("x")},
		{Key: string(make([]byte, 65)), Value: []byte("x")},
		{Key: "bad\x00key", Value: []byte("x")},
		{Key: "\xff\xfe", Value: []byte("x")},
		{Key: "empty", Value: nil},
		{Key: "huge", Value: make([]byte, cfg.Txn.MaxObjectBytes+1)},
		objects(1, 4096, good)[0],
	}
	res, err := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res[:6] {
		if r.Outcome != kvoffload.Rejected || r.Reason == "" {
			t.Errorf("object %d: %s %q, want Rejected with a reason", i, r.Outcome, r.Reason)
		}
	}
	if res[6].Outcome != kvoffload.Stored {
		t.Fatalf("valid sibling: %s %s", res[6].Outcome, res[6].Reason)
	}
	_, err = n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objects(1, 16, "a", "b", "c", "d", "e", "f", "g", "h", "i"))
	if !errors.Is(err, txn.ErrBatchTooLarge) {
		t.Fatalf("9 keys over a limit of 8: err = %v, want ErrBatchTooLarge", err)
	}
	checkConsistent(t, n)
}

// TestConflictSameKeyDifferentBytes: a committed key offloaded with other bytes is a Conflict
// and the stored bytes do not change.
func TestConflictSameKeyDifferentBytes(t *testing.T) {
	n := mustOpen(t, testConfig(t.TempDir()))
	defer mustClose(t, n)
	k := keyOf("cf", 0)
	mustOffload(t, n, objects(1, 4096, k))
	res, err := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objects(2, 4096, k))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Outcome != kvoffload.Conflict {
		t.Fatalf("outcome %s, want Conflict", res[0].Outcome)
	}
	checkReadable(t, n, 1, 4096, k)
}
