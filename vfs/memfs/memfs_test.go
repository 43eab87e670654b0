package memfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/vfs"
)

func mustCreate(tb testing.TB, fsys vfs.FS, name string) vfs.File {
	tb.Helper()
	f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		tb.Fatalf("create %s: %v", name, err)
	}
	return f
}

func mustWriteAt(tb testing.TB, f vfs.File, p []byte, off int64) {
	tb.Helper()
	if _, err := f.WriteAt(p, off); err != nil {
		tb.Fatalf("WriteAt: %v", err)
	}
}

// readAll returns the whole content of name in fsys, or nil if it does not exist.
func readAll(tb testing.TB, fsys vfs.FS, name string) []byte {
	tb.Helper()
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		tb.Fatal(err)
	}
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		tb.Fatal(err)
	}
	return buf
}

func newSyncedFile(tb testing.TB, m *FS, name string) vfs.File {
	tb.Helper()
	f := mustCreate(tb, m, name)
	if err := m.SyncDir("/"); err != nil {
		tb.Fatal(err)
	}
	return f
}

func TestCrashDropAll(t *testing.T) {
	m := New()
	f := newSyncedFile(t, m, "/f")
	mustWriteAt(t, f, []byte("synced"), 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	mustWriteAt(t, f, []byte("lost"), 6)
	if err := f.Truncate(2); err != nil {
		t.Fatal(err)
	}
	c := m.Crash(CrashDropAll, testkit.Rand(t))
	if got := readAll(t, c, "/f"); string(got) != "synced" {
		t.Fatalf("after crash: %q, want %q", got, "synced")
	}
	if got := readAll(t, m, "/f"); string(got) != "sy" {
		t.Fatalf("receiver changed by Crash: %q", got)
	}
}

func TestCrashDirectoryEntries(t *testing.T) {
	m := New()
	if err := m.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	unsynced := mustCreate(t, m, "/d/new")
	mustWriteAt(t, unsynced, []byte("data"), 0)
	if err := unsynced.Sync(); err != nil { // file data synced, directory not
		t.Fatal(err)
	}
	c := m.Crash(CrashDropAll, testkit.Rand(t))
	if names, _ := c.ReadDir("/d"); len(names) != 0 {
		t.Fatalf("created without SyncDir, survived: %v", names)
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove("/d/new"); err != nil {
		t.Fatal(err)
	}
	c = m.Crash(CrashDropAll, testkit.Rand(t))
	if got := readAll(t, c, "/d/new"); string(got) != "data" {
		t.Fatalf("removed without SyncDir: got %q, want it back with %q", got, "data")
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, m.Crash(CrashDropAll, testkit.Rand(t)), "/d/new"); got != nil {
		t.Fatalf("removed and SyncDir'd, survived: %q", got)
	}
}

// TestCrashPrefix writes numbered blocks and checks that what survives is a prefix.
func TestCrashPrefix(t *testing.T) {
	rng := testkit.Rand(t)
	m := New()
	f := newSyncedFile(t, m, "/f")
	const n = 8
	for i := range n {
		mustWriteAt(t, f, bytes.Repeat([]byte{byte(i + 1)}, 512), int64(i)*512)
	}
	seen := map[int]bool{}
	for range 200 {
		got := readAll(t, m.Crash(CrashPrefix, rng), "/f")
		k := len(got) / 512
		for i := range k {
			if got[i*512] != byte(i+1) {
				t.Fatalf("survivor %d holds %d: not a prefix", i, got[i*512])
			}
		}
		seen[k] = true
	}
	if len(seen) < 3 {
		t.Fatalf("only %d distinct prefixes in 200 crashes", len(seen))
	}
}

// TestCrashTorn checks that a torn write keeps a prefix ending at a 512-byte boundary.
func TestCrashTorn(t *testing.T) {
	rng := testkit.Rand(t)
	m := New()
	f := newSyncedFile(t, m, "/f")
	const off = 1000
	data := testkit.Payload(7, 8192)
	mustWriteAt(t, f, data, off)
	lengths := map[int]bool{}
	for range 300 {
		got := readAll(t, m.Crash(CrashTorn, rng), "/f")
		if len(got) == 0 {
			lengths[0] = true
			continue
		}
		kept := len(got) - off
		if kept <= 0 || kept >= len(data) || (off+kept)%512 != 0 {
			t.Fatalf("torn write kept %d bytes: want a strict prefix ending at a 512 boundary", kept)
		}
		if !bytes.Equal(got[off:], data[:kept]) || !bytes.Equal(got[:off], make([]byte, off)) {
			t.Fatal("torn write content is not a prefix of the write")
		}
		lengths[kept] = true
	}
	if len(lengths) < 4 {
		t.Fatalf("only %d distinct outcomes in 300 crashes", len(lengths))
	}
}

func TestPunchTruncateAllocated(t *testing.T) {
	m := New()
	f := mustCreate(t, m, "/f")
	mustWriteAt(t, f, bytes.Repeat([]byte{1}, 4*memBlockSize), 0)
	check := func(wantAlloc, wantSize int64) {
		t.Helper()
		alloc, _ := f.AllocatedBytes()
		size, _ := f.Size()
		if alloc != wantAlloc || size != wantSize {
			t.Fatalf("allocated %d size %d, want %d %d", alloc, size, wantAlloc, wantSize)
		}
	}
	check(4*memBlockSize, 4*memBlockSize)
	if err := f.PunchHole(memBlockSize, memBlockSize+100); err != nil {
		t.Fatal(err)
	}
	check(3*memBlockSize, 4*memBlockSize) // the partly covered block is zeroed, not freed
	got := readAll(t, m, "/f")
	if !bytes.Equal(got[memBlockSize:2*memBlockSize+100], make([]byte, memBlockSize+100)) || got[2*memBlockSize+100] != 1 {
		t.Fatal("punched range does not read as zeros")
	}
	if err := f.Truncate(memBlockSize + 1); err != nil {
		t.Fatal(err)
	}
	check(memBlockSize, memBlockSize+1) // block 1 was punched; block 0 stays
	if err := f.Truncate(3 * memBlockSize); err != nil {
		t.Fatal(err)
	}
	check(memBlockSize, 3*memBlockSize)
	if got := readAll(t, m, "/f"); !bytes.Equal(got[memBlockSize:], make([]byte, 2*memBlockSize)) {
		t.Fatal("extended region is not zero")
	}
}

func TestOpenAndDir(t *testing.T) {
	m := New()
	if _, err := m.OpenFile("/nodir/f", os.O_RDWR|os.O_CREATE, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("create in missing dir: %v", err)
	}
	if err := m.MkdirAll("/a/b", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"/a/z", "/a/c"} {
		mustCreate(t, m, n).Close()
	}
	if _, err := m.OpenFile("/a/z", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("O_EXCL on existing file: %v", err)
	}
	if names, _ := m.ReadDir("/a"); !slices.Equal(names, []string{"b", "c", "z"}) {
		t.Fatalf("ReadDir = %v", names)
	}
	ro, err := m.OpenFile("/a/c", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.WriteAt([]byte("x"), 0); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("write to read-only file: %v", err)
	}
	ro.Close()
	if err := ro.Sync(); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("sync after close: %v", err)
	}
}

func TestLock(t *testing.T) {
	m := New()
	l, err := m.Lock("/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock("/LOCK"); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("second Lock: %v, want ErrLocked", err)
	}
	if _, err := m.Crash(CrashDropAll, testkit.Rand(t)).Lock("/LOCK"); err != nil {
		t.Fatalf("lock carried over Crash: %v", err)
	}
	l.Close()
	if _, err := m.Lock("/LOCK"); err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
}
