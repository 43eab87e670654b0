package fsm

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// goldenState applies a fixed log touching every section of a snapshot: live entries (one
// still referenced by its commit's result, one removed since, one stored again), generations
// of removed and never-live keys, results of every command type with every outcome kind,
// members and the cluster ID.
func goldenState() *FSM {
	f := New()
	f.ApplyCommand(1, EncodeSetCluster(SetCluster{TxnID: id(1), ID: "cluster-a"}))
	f.ApplyCommand(2, setMember(2, "n1", "r1", "a1"))
	f.ApplyCommand(3, commit(3, ent("a", 1, 1), ent("b", 1, 2), ent("a", 1, 1), ent("c", 0, 3)))
	f.ApplyCommand(4, commit(4, ent("b", 2, 9), entShared("d", 1, 5), entShared("e", 1, 5)))
	f.ApplyCommand(5, remove(5, KeyGen{Key: "a"}, KeyGen{Key: "never"}))
	f.ApplyCommand(6, commit(6, ent("a", 3, 7)))
	f.ApplyCommand(7, abort(7))
	f.ApplyCommand(8, EncodePrune(Prune{TxnID: id(8), Before: 2}))
	return f
}

// The snapshot of goldenState is byte for byte testdata/snapshot-v3.golden, written by the
// binary before the compact in-memory state (issue 9: the live slab, the generations held
// once, the compact results): the state's layout in memory changed, its encoding did not.
// The golden file restores to the same Hash and re-encodes to itself. Regenerate only for a
// deliberate, versioned format change: go test ./fsm -run TestSnapshotGolden -update.
func TestSnapshotGolden(t *testing.T) {
	path := filepath.Join("testdata", "snapshot-v3.golden")
	f := goldenState()
	var got bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&got); err != nil {
		t.Fatal(err)
	}
	if *updateResult {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("snapshot encoding changed: %d bytes, golden %d", got.Len(), len(want))
	}
	g := New()
	if err := g.Restore(bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, g)
	if g.Hash() != f.Hash() {
		t.Fatal("the golden snapshot restores to another Hash")
	}
	var again bytes.Buffer
	if _, err := g.Snapshot().WriteTo(&again); err != nil || !bytes.Equal(again.Bytes(), want) {
		t.Fatalf("the restored golden snapshot re-encodes differently (%v)", err)
	}
}
