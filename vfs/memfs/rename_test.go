package memfs

import (
	"errors"
	"io/fs"
	"testing"
)

// TestRenameDurableAtSyncDir: a rename replaces the target at once, and a crash before
// SyncDir leaves both names as they were durable; after SyncDir, only the new name.
func TestRenameDurableAtSyncDir(t *testing.T) {
	m := New()
	if err := m.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"/d/old": "new content", "/d/target": "previous"} {
		f := mustCreate(t, m, name)
		mustWriteAt(t, f, []byte(data), 0)
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	if err := m.Rename("/d/old", "/d/target"); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, m, "/d/target"); string(got) != "new content" {
		t.Fatalf("after Rename: target holds %q, want %q", got, "new content")
	}
	if got := readAll(t, m, "/d/old"); got != nil {
		t.Fatalf("after Rename: old name still holds %q", got)
	}
	c := m.Crash(CrashDropAll, nil)
	if old, target := readAll(t, c, "/d/old"), readAll(t, c, "/d/target"); string(old) != "new content" || string(target) != "previous" {
		t.Fatalf("crash before SyncDir: old=%q target=%q, want both as durable", old, target)
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	c = m.Crash(CrashDropAll, nil)
	if old, target := readAll(t, c, "/d/old"), readAll(t, c, "/d/target"); old != nil || string(target) != "new content" {
		t.Fatalf("crash after SyncDir: old=%q target=%q, want only the new name", old, target)
	}
	if err := m.Rename("/d/missing", "/d/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Rename of a missing name: %v, want fs.ErrNotExist", err)
	}
}

// TestLosePending: a file's unsynced writes are gone, as after a failed fsync; synced
// content and the unsynced truncate (metadata) stay.
func TestLosePending(t *testing.T) {
	m := New()
	if err := m.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, m, "/d/f")
	mustWriteAt(t, f, []byte("synced"), 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	mustWriteAt(t, f, []byte("LOST"), 0)
	if err := f.Truncate(4); err != nil {
		t.Fatal(err)
	}
	if err := m.LosePending("/d/f"); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, m, "/d/f"); string(got) != "sync" {
		t.Fatalf("after LosePending: %q, want the synced bytes, still truncated: %q", got, "sync")
	}
	if err := m.LosePending("/d/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LosePending of a missing name: %v, want fs.ErrNotExist", err)
	}
}
