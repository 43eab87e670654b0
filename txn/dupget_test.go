package txn

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/txn/txntest"
)

// TestBatchGetDuplicatesCountAgainstMaxBatchBytes: a key named many times in one BatchGet
// counts once per position against MaxBatchBytes (it returns its bytes at every position),
// and every position owns its bytes: otherwise naming a 1 MiB key 100 times returns 100 MiB
// under a 1 MiB limit, all positions sharing one slice.
func TestBatchGetDuplicatesCountAgainstMaxBatchBytes(t *testing.T) {
	m := txntest.NewMeta()
	c, _ := newTestCoordinator(t, m)
	c.cfg.MaxBatchBytes = 1 << 20
	val := bytes.Repeat([]byte{7}, 512<<10)
	if _, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{{Key: "k", Value: val}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchGet(context.Background(), []string{"k", "k", "k"}); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("3 x 512 KiB under a 1 MiB limit: err = %v, want ErrBatchTooLarge", err)
	}
	res, err := c.BatchGet(context.Background(), []string{"k", "k"})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != kvoffload.Found || res[1].Status != kvoffload.Found || !bytes.Equal(res[1].Value, val) {
		t.Fatalf("two positions: %s, %s", res[0].Status, res[1].Status)
	}
	res[0].Value[0] = 9
	if res[1].Value[0] != 7 {
		t.Fatal("the two positions share one slice: writing one changed the other")
	}
}
