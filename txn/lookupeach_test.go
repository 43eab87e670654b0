package txn

import (
	"context"
	"slices"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
)

// eachMeta is a txntest.Meta that offers the batch lookup (eachLookup), as node's Meta does.
type eachMeta struct{ *txntest.Meta }

func (m eachMeta) LookupEach(n int, key func(int) string, fn func(int, fsm.Entry, bool, uint64)) {
	m.FSM.LookupEach(n, key, fn)
}

// Admission answers the same through the batch lookup (eachLookup, the node's path) as key
// by key: new keys Stored, the same bytes AlreadyStored, other bytes Conflict,
// a removed key Stored again, a repeat within the batch and an invalid key as before.
func TestAdmissionLookupEachAgrees(t *testing.T) {
	run := func(m Meta, f *fsm.FSM) [][]kvoffload.KeyResult {
		c, data := newCoordinatorFor(t, m, f)
		defer data.Close()
		defer c.Close()
		ctx := context.Background()
		var out [][]kvoffload.KeyResult
		offload := func(objs ...kvoffload.Object) {
			res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), objs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range res {
				res[i].Reason = "" // the reasons name txn IDs
			}
			out = append(out, res)
		}
		offload(obj("a", 1), obj("b", 2), obj("gone", 3))
		if _, err := c.Remove(ctx, []string{"gone"}); err != nil {
			t.Fatal(err)
		}
		offload(obj("a", 1), obj("b", 9), obj("gone", 3), obj("c", 4), obj("c", 4), obj("", 5))
		return out
	}
	if _, ok := Meta(eachMeta{}).(eachLookup); !ok {
		t.Fatal("eachMeta does not offer LookupEach")
	}
	plain := txntest.NewMeta()
	each := txntest.NewMeta()
	want, got := run(plain, plain.FSM), run(eachMeta{each}, each.FSM)
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("batch %d: with LookupEach %+v, key by key %+v", i, got[i], want[i])
		}
	}
	if o := want[1]; o[0].Outcome != kvoffload.AlreadyStored || o[1].Outcome != kvoffload.Conflict || o[2].Outcome != kvoffload.Stored {
		t.Fatalf("the scenario does not cover what it means to: %+v", o)
	}
}
