package fsm

import (
	"bytes"
	"reflect"
	"testing"
)

// A recorded COMMIT keeps its Stored outcomes as references to the live entries, and its
// Result reads back as apply returned it, before and after the keys are removed or stored
// again, and after a snapshot round trip.
func TestRecordedResultsRefer(t *testing.T) {
	f := New()
	applied := f.ApplyCommand(1, commit(1, ent("a", 1, 1), ent("b", 1, 2), ent("a", 1, 1), ent("c", 0, 3)))
	if got := outcomes(applied); !reflect.DeepEqual(got, []Outcome{OutcomeStored, OutcomeStored, OutcomeAlreadyStored, OutcomeStale}) {
		t.Fatalf("outcomes %v", got)
	}
	if rec := f.st.txns[id(1)]; rec.refs != 3 || len(rec.entries) != 0 {
		t.Fatalf("record holds %d references and %d entries, want 3 and 0", rec.refs, len(rec.entries))
	}
	same := func(when string) {
		t.Helper()
		mustCheck(t, f)
		if r, ok := f.TxnResult(id(1)); !ok || !reflect.DeepEqual(r, applied) {
			t.Fatalf("%s: TxnResult %+v, apply returned %+v", when, r, applied)
		}
		if r := f.ApplyCommand(99, commit(1, ent("a", 1, 1))); !reflect.DeepEqual(r, applied) {
			t.Fatalf("%s: de-duplicated %+v, apply returned %+v", when, r, applied)
		}
	}
	same("live")
	f.ApplyCommand(2, remove(2, KeyGen{Key: "a"}))
	if rec := f.st.txns[id(1)]; rec.refs != 0 || len(rec.entries) != 3 {
		t.Fatalf("after a remove the record holds %d references and %d entries, want 0 and 3", rec.refs, len(rec.entries))
	}
	same("after the remove")
	f.ApplyCommand(3, commit(3, ent("a", 3, 7)))
	same("stored again")
	var snap bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(&snap); err != nil {
		t.Fatal(err)
	}
	if g.Hash() != f.Hash() {
		t.Fatal("restored Hash differs")
	}
	// A restored Stored outcome whose entry is still live is a reference again.
	if rec := g.st.txns[id(3)]; rec.refs != 1 {
		t.Fatalf("restored record of txn 3 holds %d references, want 1", rec.refs)
	}
	f = g
	same("restored")
}
