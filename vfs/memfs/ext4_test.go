package memfs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// crashes is how many ext4 crashes each rule's test draws.
const crashes = 300

func mustDir(tb testing.TB, m *FS, dir string) {
	tb.Helper()
	testkit.Must(tb, m.MkdirAll(dir, 0o755), "mkdir %s", dir)
}

// TestExt4MetadataPrefix: the creations since the last commit survive as a prefix, in the
// order they were made.
func TestExt4MetadataPrefix(t *testing.T) {
	rng := testkit.Rand(t)
	m := New()
	mustDir(t, m, "/d")
	order := []string{"a", "b", "c", "d", "e"}
	for _, n := range order {
		mustCreate(t, m, "/d/"+n).Close()
	}
	seen := map[int]bool{}
	for range crashes {
		names, err := m.Crash(CrashExt4Ordered, rng).ReadDir("/d")
		testkit.Must(t, err, "ReadDir")
		if !slices.Equal(names, order[:len(names)]) {
			t.Fatalf("survivors %v: not a prefix of %v", names, order)
		}
		seen[len(names)] = true
	}
	if len(seen) < 4 {
		t.Fatalf("only %d distinct prefixes in %d crashes", len(seen), crashes)
	}
}

// TestExt4RenameThenDirSync: a rename not followed by a fsync may or may not survive (the
// file under exactly one of its names, its synced bytes intact); after SyncDir it does.
func TestExt4RenameThenDirSync(t *testing.T) {
	rng := testkit.Rand(t)
	m := New()
	mustDir(t, m, "/d")
	f := mustCreate(t, m, "/d/old")
	mustWriteAt(t, f, []byte("synced"), 0)
	testkit.Must(t, f.Sync(), "sync") // a new inode: its fsync commits its creation
	testkit.Must(t, m.Rename("/d/old", "/d/new"), "rename")
	seen := map[string]bool{}
	for range crashes {
		c := m.Crash(CrashExt4Ordered, rng)
		old, nw := readAll(t, c, "/d/old"), readAll(t, c, "/d/new")
		switch {
		case string(old) == "synced" && nw == nil:
			seen["old"] = true
		case old == nil && string(nw) == "synced":
			seen["new"] = true
		default:
			t.Fatalf("after a rename: old=%q new=%q, want the synced file under one name", old, nw)
		}
	}
	if len(seen) != 2 {
		t.Fatalf("outcomes %v in %d crashes, want both the old and the new name", seen, crashes)
	}
	testkit.Must(t, m.SyncDir("/d"), "syncdir")
	for range crashes {
		c := m.Crash(CrashExt4Ordered, rng)
		if old, nw := readAll(t, c, "/d/old"), readAll(t, c, "/d/new"); old != nil || string(nw) != "synced" {
			t.Fatalf("after rename and SyncDir: old=%q new=%q", old, nw)
		}
	}
}

// TestExt4FsyncCommitsEarlierMetadata: a fsync of a file changed in the running transaction
// commits every metadata operation before it, another file's rename too (JBD2 has one
// running transaction); a fdatasync of a file with only overwrites commits nothing.
func TestExt4FsyncCommitsEarlierMetadata(t *testing.T) {
	rng := testkit.Rand(t)
	m := New()
	mustDir(t, m, "/d")
	for _, n := range []string{"/d/x", "/d/over"} {
		f := mustCreate(t, m, n)
		mustWriteAt(t, f, []byte("12345678"), 0)
		testkit.Must(t, f.Sync(), "sync %s", n)
	}
	over, err := m.OpenFile("/d/over", os.O_RDWR, 0)
	testkit.Must(t, err, "open")
	testkit.Must(t, m.Rename("/d/x", "/d/y"), "rename")
	mustWriteAt(t, over, []byte("ABCD"), 0) // an overwrite: no metadata
	testkit.Must(t, over.Sync(), "sync")
	seen := map[bool]bool{}
	for range crashes {
		c := m.Crash(CrashExt4Ordered, rng)
		if got := readAll(t, c, "/d/over"); string(got) != "ABCD5678" {
			t.Fatalf("synced overwrite reads %q", got)
		}
		seen[readAll(t, c, "/d/y") != nil] = true
	}
	if len(seen) != 2 {
		t.Fatalf("rename before an overwrite's fsync: survived %v, want both ways", seen)
	}
	grow := mustCreate(t, m, "/d/grow")
	mustWriteAt(t, grow, []byte("grown"), 0)
	testkit.Must(t, grow.Sync(), "sync")
	for range crashes {
		c := m.Crash(CrashExt4Ordered, rng)
		if readAll(t, c, "/d/y") == nil || string(readAll(t, c, "/d/grow")) != "grown" {
			t.Fatal("a new file's fsync did not commit the rename before it, or lost the file")
		}
	}
}

// TestExt4AppendNeverZeros: after a crash a file's size never covers appended bytes that
// did not reach the disk: it holds a prefix of the appends, whole.
func TestExt4AppendNeverZeros(t *testing.T) {
	rng := testkit.Rand(t)
	m := New()
	f := newSyncedFile(t, m, "/f")
	testkit.Must(t, f.Sync(), "sync")
	data := bytes.Repeat([]byte("0123456789abcdef"), 700) // no zero byte
	const piece = 1000
	for off := 0; off < len(data); off += piece {
		mustWriteAt(t, f, data[off:min(off+piece, len(data))], int64(off))
	}
	lengths := map[int]bool{}
	for range crashes {
		got := readAll(t, m.Crash(CrashExt4Ordered, rng), "/f")
		if !bytes.Equal(got, data[:len(got)]) || (len(got)%piece != 0 && len(got) != len(data)) {
			t.Fatalf("crashed file of %d bytes is not a prefix of whole appends", len(got))
		}
		lengths[len(got)] = true
	}
	if len(lengths) < 4 {
		t.Fatalf("only %d distinct sizes in %d crashes", len(lengths), crashes)
	}
}

// TestExt4OverwritePages: unsynced overwrites survive per 4 KiB page independently, a page
// torn only at 512-byte sectors.
func TestExt4OverwritePages(t *testing.T) {
	rng := testkit.Rand(t)
	m := New()
	f := newSyncedFile(t, m, "/f")
	const pages = 4
	mustWriteAt(t, f, bytes.Repeat([]byte{'A'}, pages*memBlockSize), 0)
	testkit.Must(t, f.Sync(), "sync")
	mustWriteAt(t, f, bytes.Repeat([]byte{'B'}, pages*memBlockSize), 0)
	patterns := map[string]bool{}
	torn := false
	for range crashes {
		got := readAll(t, m.Crash(CrashExt4Ordered, rng), "/f")
		if len(got) != pages*memBlockSize {
			t.Fatalf("overwrite changed the size to %d", len(got))
		}
		var pat strings.Builder
		for p := range pages {
			page := got[p*memBlockSize : (p+1)*memBlockSize]
			for s := 0; s < memBlockSize; s += 512 {
				if sec := page[s : s+512]; !bytes.Equal(sec, bytes.Repeat(sec[:1], 512)) {
					t.Fatalf("page %d sector %d mixes old and new bytes", p, s/512)
				}
			}
			switch {
			case bytes.Count(page, []byte{'A'}) == memBlockSize:
				pat.WriteByte('A')
			case bytes.Count(page, []byte{'B'}) == memBlockSize:
				pat.WriteByte('B')
			default:
				pat.WriteByte('t')
				torn = true
			}
		}
		patterns[pat.String()] = true
	}
	if !torn || !patterns["ABAB"] && !patterns["BABA"] && !patterns["ABBA"] {
		t.Fatalf("pages not independent or never torn: %v", patterns)
	}
}

// TestExt4RenameOverExisting: the weaker guarantee. A file written, not fsynced, and renamed
// over an existing one leaves the old content or the new file, whose appends may not have
// reached the disk: auto_da_alloc only starts their writeback before the rename ("not a
// guarantee", ext4: allocate delayed allocation blocks before rename).
func TestExt4RenameOverExisting(t *testing.T) {
	rng := testkit.Rand(t)
	m := New()
	target := newSyncedFile(t, m, "/target")
	mustWriteAt(t, target, []byte("old"), 0)
	testkit.Must(t, target.Sync(), "sync")
	tmp := mustCreate(t, m, "/tmp")
	mustWriteAt(t, tmp, []byte("new content"), 0)
	testkit.Must(t, m.Rename("/tmp", "/target"), "rename")
	seen := map[string]bool{}
	for range crashes {
		got := string(readAll(t, m.Crash(CrashExt4Ordered, rng), "/target"))
		if got != "old" && got != "new content" && got != "" {
			t.Fatalf("target reads %q", got)
		}
		seen[got] = true
	}
	if len(seen) != 3 {
		t.Fatalf("outcomes %v, want old, new and empty", seen)
	}
}

// TestExt4TruncateOrdered: truncates are journaled with the entry changes, in order: a
// creation after a truncate survives only with it.
func TestExt4TruncateOrdered(t *testing.T) {
	rng := testkit.Rand(t)
	m := New()
	f := newSyncedFile(t, m, "/f")
	mustWriteAt(t, f, bytes.Repeat([]byte{1}, 2*memBlockSize), 0)
	testkit.Must(t, f.Sync(), "sync")
	testkit.Must(t, f.Truncate(memBlockSize), "truncate")
	mustCreate(t, m, "/after").Close()
	seen := map[string]bool{}
	for range crashes {
		c := m.Crash(CrashExt4Ordered, rng)
		size, after := len(readAll(t, c, "/f")), readAll(t, c, "/after") != nil
		if after && size != memBlockSize {
			t.Fatalf("the creation after the truncate survived, the truncate not (size %d)", size)
		}
		seen[fmt.Sprint(size, after)] = true
	}
	if len(seen) != 3 {
		t.Fatalf("outcomes %v, want the 3 prefixes", seen)
	}
}

// TestExt4Replays: a crash is a function of the FS and the rng state.
func TestExt4Replays(t *testing.T) {
	seed := testkit.Seed(t)
	m := New()
	f := newSyncedFile(t, m, "/f")
	mustWriteAt(t, f, testkit.Payload(seed, 3*memBlockSize), 100)
	mustCreate(t, m, "/g").Close()
	a := readAll(t, m.Crash(CrashExt4Ordered, rand.New(rand.NewPCG(seed, 1))), "/f")
	b := readAll(t, m.Crash(CrashExt4Ordered, rand.New(rand.NewPCG(seed, 1))), "/f")
	if !bytes.Equal(a, b) {
		t.Fatalf("seed %d: two crashes with the same rng differ", seed)
	}
}
