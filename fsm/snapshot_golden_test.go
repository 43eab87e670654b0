package fsm

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
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

// goldenStateV4 is goldenState with two more members, one of them removed since: the
// removed section (version 4).
func goldenStateV4() *FSM {
	f := goldenState()
	f.ApplyCommand(9, setMember(9, "n2", "r2", "a2"))
	f.ApplyCommand(10, delMember(10, "n2"))
	f.ApplyCommand(11, delMember(11, "gone-before-joining"))
	return f
}

// The snapshot of goldenStateV4 is byte for byte testdata/snapshot-v4.golden. The golden file
// restores to the same Hash and re-encodes to itself. Regenerate only for a deliberate,
// versioned format change: go test ./fsm -run TestSnapshotGolden -update.
func TestSnapshotGolden(t *testing.T) {
	path := filepath.Join("testdata", "snapshot-v4.golden")
	f := goldenStateV4()
	var got bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&got); err != nil {
		t.Fatal(err)
	}
	want := testkit.Golden(t, path, got.Bytes(), "the snapshot")
	g := New()
	if err := g.Restore(bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, g)
	if g.Hash() != f.Hash() {
		t.Fatal("the golden snapshot restores to another Hash")
	}
	if !g.WasRemoved("n2") || !g.WasRemoved("gone-before-joining") || g.WasRemoved("n1") {
		t.Fatal("the golden snapshot restores another removed set")
	}
	var again bytes.Buffer
	if _, err := g.Snapshot().WriteTo(&again); err != nil || !bytes.Equal(again.Bytes(), want) {
		t.Fatalf("the restored golden snapshot re-encodes differently (%v)", err)
	}
}

// testdata/snapshot-v3.golden, goldenState's snapshot as the binary before the removed
// section (version 3) wrote it, still restores, to goldenState (no removed node), and is
// written again as version 4.
func TestSnapshotV3Restores(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "snapshot-v3.golden"))
	if err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(bytes.NewReader(old)); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, g)
	if g.Hash() != goldenState().Hash() {
		t.Fatal("the version 3 snapshot restores to another state than goldenState")
	}
	var again bytes.Buffer
	if _, err := g.Snapshot().WriteTo(&again); err != nil || again.Bytes()[4] != snapshotVersion {
		t.Fatalf("re-encoded: version %d, %v; want %d", again.Bytes()[4], err, snapshotVersion)
	}
}
