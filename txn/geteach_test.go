package txn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/txn/txntest"
)

// valueOf is the value stored under k in these tests: 8 KiB, distinct per key.
func valueOf(k string) []byte { return bytes.Repeat([]byte(k+";"), 8<<10/(len(k)+1)) }

func offloadNamed(t *testing.T, c *Coordinator, keys ...string) {
	t.Helper()
	objs := make([]kvoffload.Object, len(keys))
	for i, k := range keys {
		objs[i] = kvoffload.Object{Key: k, Value: valueOf(k)}
	}
	if _, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), objs); err != nil {
		t.Fatal(err)
	}
}

// TestBatchGetEachVisitsEveryPositionOnce: every position is visited exactly once with its
// key's verified bytes (the same bytes at each position of a repeated key), a missing key is
// NotFound with its code, and the results match BatchGet's.
func TestBatchGetEachVisitsEveryPositionOnce(t *testing.T) {
	c, _ := newTestCoordinator(t, txntest.NewMeta())
	var stored []string
	for i := range 64 {
		stored = append(stored, fmt.Sprintf("k%02d", i))
	}
	offloadNamed(t, c, stored...)
	keys := append([]string{"k07", "missing", "k07"}, stored...)
	var mu sync.Mutex
	visits := make([]int, len(keys))
	got := make([]kvoffload.GetResult, len(keys))
	err := c.BatchGetEach(context.Background(), keys, nil, func(i int, r kvoffload.GetResult) bool {
		if r.Value != nil {
			r.Value = bytes.Clone(r.Value) // borrowed until this returns
		}
		mu.Lock()
		defer mu.Unlock()
		visits[i]++
		got[i] = r
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	want, err := c.BatchGet(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if visits[i] != 1 {
			t.Fatalf("position %d (%s) visited %d times", i, k, visits[i])
		}
		g := got[i]
		if g.Key != k || g.Status != want[i].Status || g.Code != want[i].Code || g.Size != want[i].Size || !bytes.Equal(g.Value, want[i].Value) {
			t.Fatalf("position %d: BatchGetEach gave %s %s %s size %d, BatchGet %s %s %s size %d", i, g.Key, g.Status, g.Code, g.Size, want[i].Key, want[i].Status, want[i].Code, want[i].Size)
		}
		switch {
		case k == "missing" && (g.Status != kvoffload.NotFound || g.Code != kvoffload.CodeNotFound):
			t.Fatalf("missing key: %s %s", g.Status, g.Code)
		case k != "missing" && (g.Status != kvoffload.Found || !bytes.Equal(g.Value, valueOf(k)) || g.Size != len(valueOf(k))):
			t.Fatalf("%s: %s, %d bytes, want its %d bytes", k, g.Status, len(g.Value), len(valueOf(k)))
		}
	}
}

// TestBatchGetEachKeptBytesAreNotRecycled: bytes a visit keeps stay the visitor's while later
// reads recycle their buffers (a kept buffer back in the pool would be overwritten by the
// next read of another key of the same size), and bytes not kept are recycled without
// harming the values later reads return.
func TestBatchGetEachKeptBytesAreNotRecycled(t *testing.T) {
	c, _ := newTestCoordinator(t, txntest.NewMeta())
	var keys []string
	for i := range 32 {
		keys = append(keys, fmt.Sprintf("key-%03d", i)) // same length: one record size, one pool
	}
	offloadNamed(t, c, keys...)
	kept := make([][]byte, 8)
	if err := c.BatchGetEach(context.Background(), keys[:8], nil, func(i int, r kvoffload.GetResult) bool {
		kept[i] = r.Value
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		err := c.BatchGetEach(context.Background(), keys[8:], nil, func(i int, r kvoffload.GetResult) bool {
			if k := keys[8+i]; !bytes.Equal(r.Value, valueOf(k)) {
				t.Errorf("round %d: %s read back other bytes", round, k)
			}
			return false
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range kept {
		if !bytes.Equal(v, valueOf(keys[i])) {
			t.Fatalf("kept value of %s changed after later reads: its buffer was recycled", keys[i])
		}
	}
}

// TestBatchGetEachRefusesBeforeVisiting: a batch over MaxBatchBytes is refused with
// ErrBatchTooLarge and nothing is visited.
func TestBatchGetEachRefusesBeforeVisiting(t *testing.T) {
	c, _ := newTestCoordinator(t, txntest.NewMeta())
	offloadNamed(t, c, "a", "b")
	c.cfg.MaxBatchBytes = int64(len(valueOf("a")))
	visited := 0
	err := c.BatchGetEach(context.Background(), []string{"a", "b", "missing"}, nil, func(int, kvoffload.GetResult) bool {
		visited++
		return false
	})
	if !errors.Is(err, ErrBatchTooLarge) || visited != 0 {
		t.Fatalf("two values over a limit of one: err = %v, %d visits; want ErrBatchTooLarge and none", err, visited)
	}
}
