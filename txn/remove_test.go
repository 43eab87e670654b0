package txn

import (
	"context"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/txn/txntest"
)

// Remove of keys that can never be stored answers not removed and proposes nothing for them:
// a 3 MiB key does not travel through Raft, and no generation entry is kept for it. Valid
// keys in the same call are removed.
func TestRemoveInvalidKeys(t *testing.T) {
	m := txntest.NewMeta()
	c, _ := newTestCoordinator(t, m)
	ctx := context.Background()
	if res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 1)}); err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("offload: %v %+v", err, res)
	}
	huge := strings.Repeat("x", 3<<20)
	keys := []string{"", huge, "bad\x01key", "k", "\xff"}
	res, err := c.Remove(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Key != keys[i] || r.Removed != (keys[i] == "k") {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	for _, k := range []string{"", huge, "bad\x01key", "\xff"} {
		if g := m.FSM.Generation(k); g != 0 {
			t.Fatalf("a generation entry (%d) was kept for an invalid key of %d bytes", g, len(k))
		}
	}
	if res, err := c.Remove(ctx, []string{""}); err != nil || len(res) != 1 || res[0].Removed {
		t.Fatalf("remove of only invalid keys: %v %+v", err, res)
	}
}
