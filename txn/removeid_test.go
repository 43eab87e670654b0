package txn

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
)

// Remove under a txn ID already used for another request is refused with ErrTxnIDInUse, as
// BatchOffload refuses one, instead of answering removed=false for keys it never looked at;
// a true retry still gets the original answer.
func TestRemoveReusedTxnID(t *testing.T) {
	m := txntest.NewMeta()
	c, _ := newTestCoordinator(t, m)
	ctx := context.Background()
	offID := kvoffload.NewTxnID()
	if res, err := c.BatchOffload(ctx, offID, []kvoffload.Object{obj("a", 1), obj("b", 2)}); err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("offload: %v %+v", err, res)
	}
	if res, err := c.RemoveTxn(ctx, offID, []string{"a"}); !errors.Is(err, ErrTxnIDInUse) || !strings.Contains(err.Error(), "commit") {
		t.Fatalf("remove under an offload's txn ID: %v %+v, want ErrTxnIDInUse naming the commit", err, res)
	}
	if _, ok := m.FSM.Lookup("a"); !ok {
		t.Fatal("the refused remove removed the key")
	}

	rmID := kvoffload.NewTxnID()
	if res, err := c.RemoveTxn(ctx, rmID, []string{"a", ""}); err != nil || !res[0].Removed || res[1].Removed {
		t.Fatalf("remove: %v %+v", err, res)
	}
	if res, err := c.RemoveTxn(ctx, rmID, []string{"a", ""}); err != nil || !res[0].Removed {
		t.Fatalf("retry of the remove: %v %+v, want the original answer", err, res)
	}
	for _, keys := range [][]string{{"b"}, {"a", "b"}, {"a", "a2"}} {
		if res, err := c.RemoveTxn(ctx, rmID, keys); !errors.Is(err, ErrTxnIDInUse) {
			t.Fatalf("remove of %q under the txn ID of a remove of [a]: %v %+v, want ErrTxnIDInUse", keys, err, res)
		}
	}
	if _, ok := m.FSM.Lookup("b"); !ok {
		t.Fatal("a refused remove removed b")
	}
}

// The check also holds when this node has not applied the earlier request (a lagging
// member): the proposal's de-duplicated result is checked too.
func TestRemoveReusedTxnIDNotYetApplied(t *testing.T) {
	m := &laggingMeta{Meta: txntest.NewMeta(), hidden: map[string]bool{}}
	c, _ := newCoordinatorFor(t, m, m.FSM)
	id := kvoffload.NewTxnID()
	m.Apply(fsm.EncodeRemove(fsm.Remove{TxnID: id, Keys: []fsm.KeyGen{{Key: "x"}}}))
	hid := &hiddenResults{Meta: m, id: id}
	c.meta = hid
	if res, err := c.RemoveTxn(context.Background(), id, []string{"y"}); !errors.Is(err, ErrTxnIDInUse) {
		t.Fatalf("remove under the ID of an unapplied remove of other keys: %v %+v", err, res)
	}
}

// hiddenResults hides the recorded result of txn id from TxnResult (not yet applied here).
type hiddenResults struct {
	Meta
	id fsm.TxnID
}

func (h *hiddenResults) TxnResult(id fsm.TxnID) (*fsm.Result, bool) {
	if id == h.id {
		return nil, false
	}
	return h.Meta.TxnResult(id)
}

// Every request-level refusal names the limit, its value, the size and the key at which it
// was reached; the per-key reason of an object too large names its size and the limit.
func TestLimitMessagesNameTheNumbers(t *testing.T) {
	m := txntest.NewMeta()
	c, _ := newTestCoordinator(t, m)
	c.cfg.MaxBatchKeys, c.cfg.MaxBatchBytes, c.cfg.MaxObjectBytes = 3, 10, 6
	ctx := context.Background()
	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	objs := make([]kvoffload.Object, len(keys))
	for i, k := range keys {
		objs[i] = kvoffload.Object{Key: k, Value: value('v', 1)}
	}
	for name, err := range map[string]error{
		"offload": func() error { _, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), objs); return err }(),
		"remove":  func() error { _, err := c.Remove(ctx, keys); return err }(),
	} {
		if !errors.Is(err, ErrBatchTooLarge) || !strings.Contains(err.Error(), `batch of 5 keys at key "k3" exceeds MaxBatchKeys 3`) {
			t.Errorf("%s of 5 keys: %v", name, err)
		}
	}
	_, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: value('a', 6)}, {Key: "b", Value: value('b', 5)}})
	if !errors.Is(err, ErrBatchTooLarge) || !strings.Contains(err.Error(), `batch of 11 bytes at key "b" exceeds MaxBatchBytes 10`) {
		t.Errorf("offload of 11 bytes: %v", err)
	}
	res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "big", Value: value('a', 7)}})
	if err != nil || res[0].Outcome != kvoffload.Rejected || !strings.Contains(res[0].Reason, "7 bytes exceeds MaxObjectBytes 6") {
		t.Errorf("an object of 7 bytes: %v %+v", err, res)
	}
}
