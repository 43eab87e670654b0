package fsm

import (
	"bytes"
	"slices"
	"testing"
)

// recorder is a ChangeHook that keeps what it is told.
type recorder struct {
	changes  []Change
	indexes  []uint64
	restored []uint64
}

func (r *recorder) Applied(index uint64, ch []Change) {
	r.indexes = append(r.indexes, index)
	r.changes = append(r.changes, ch...)
}
func (r *recorder) Restored(index uint64) { r.restored = append(r.restored, index) }

// Only keys that became live or stopped being live are reported, numbered from 1 within
// their command, with the removal's cause from the REMOVE's reason; a de-duplicated command
// reports nothing.
func TestChangesOnlyForKeysThatChanged(t *testing.T) {
	f := New()
	var r recorder
	f.WatchChanges(&r)
	f.ApplyCommand(1, commit(1, ent("a", 1, 1), ent("b", 1, 2)))
	f.ApplyCommand(2, commit(2, ent("a", 2, 1), ent("c", 1, 3))) // a: AlreadyStored
	f.ApplyCommand(3, commit(2, ent("d", 1, 4)))                 // de-duplicated
	f.ApplyCommand(4, EncodeRemove(Remove{TxnID: id(4), Keys: []KeyGen{{Key: "zz"}, {Key: "b"}}, Reason: "evicted: capacity"}))
	f.ApplyCommand(5, EncodeRemove(Remove{TxnID: id(5), Keys: []KeyGen{{Key: "a"}}, Reason: "owner n1 left the cluster"}))
	f.ApplyCommand(6, abort(6))
	want := []Change{
		{Index: 1, Ordinal: 1, Kind: ChangeStored, Key: "a", Size: 10, Owner: "n1", Gen: 1},
		{Index: 1, Ordinal: 2, Kind: ChangeStored, Key: "b", Size: 10, Owner: "n1", Gen: 1},
		{Index: 2, Ordinal: 1, Kind: ChangeStored, Key: "c", Size: 10, Owner: "n1", Gen: 1},
		{Index: 4, Ordinal: 1, Kind: ChangeRemoved, Key: "b", Size: 10, Owner: "n1", Gen: 1, Cause: CauseEvicted},
		{Index: 5, Ordinal: 1, Kind: ChangeRemoved, Key: "a", Size: 10, Owner: "n1", Gen: 1, Cause: CauseOwnerLeft},
	}
	if !slices.Equal(r.changes, want) {
		t.Fatalf("changes:\n got %+v\nwant %+v", r.changes, want)
	}
	if !slices.Equal(r.indexes, []uint64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("Applied called for indexes %v, want 1 to 6", r.indexes)
	}
	keys, applied := f.List()
	if applied != 6 || len(keys) != 1 || keys[0].Key != "c" {
		t.Fatalf("List = %+v at %d, want c at 6", keys, applied)
	}
	var buf bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	g := New()
	g.WatchChanges(&r)
	if err := g.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.restored, []uint64{6}) {
		t.Fatalf("Restored called with %v, want [6]", r.restored)
	}
}

func TestRemoveCause(t *testing.T) {
	for reason, want := range map[string]Cause{
		"remove": CauseRemoved, "evicted: capacity": CauseEvicted, "owner n2 left the cluster": CauseOwnerLeft,
		"bucket 7 lost": CausePruned, "corrupt metadata": CausePruned, "corrupt record": CausePruned, "": CauseRemoved,
	} {
		if got := RemoveCause(reason); got != want {
			t.Errorf("RemoveCause(%q) = %v, want %v", reason, got, want)
		}
	}
}
