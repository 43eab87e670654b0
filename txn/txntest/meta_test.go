package txntest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/txn/txntest"
)

var _ txn.Meta = (*txntest.Meta)(nil)

func commit(txn byte, key string) []byte {
	return fsm.EncodeCommit(fsm.Commit{TxnID: fsm.TxnID{txn}, Node: "n1", Entries: []fsm.Entry{{
		Key: key, Extent: fsm.Extent{Bucket: 1, Offset: int64(txn) * 4096, Length: 4096}, Size: 100, Gen: 1,
	}}})
}

// TestFailNext: a lost proposal fails with ErrLost and is applied only under ApplyAnyway;
// the proposals after the lost ones apply.
func TestFailNext(t *testing.T) {
	for _, anyway := range []bool{false, true} {
		m := txntest.NewMeta()
		m.ApplyAnyway = anyway
		m.FailNext(1)
		if _, err := m.Propose(context.Background(), commit(1, "a")); !errors.Is(err, txntest.ErrLost) {
			t.Fatalf("ApplyAnyway %v: the first proposal: %v, want ErrLost", anyway, err)
		}
		if _, ok := m.Lookup("a"); ok != anyway {
			t.Errorf("ApplyAnyway %v: the lost proposal applied: %v", anyway, ok)
		}
		if _, err := m.Propose(context.Background(), commit(2, "b")); err != nil {
			t.Fatalf("ApplyAnyway %v: the second proposal: %v", anyway, err)
		}
		if _, ok := m.Lookup("b"); !ok {
			t.Errorf("ApplyAnyway %v: the second proposal did not apply", anyway)
		}
		if want := map[bool]uint64{false: 1, true: 2}[anyway]; m.LastIndex() != want {
			t.Errorf("ApplyAnyway %v: last index %d, want %d", anyway, m.LastIndex(), want)
		}
	}
}
