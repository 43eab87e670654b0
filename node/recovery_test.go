package node

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/wal"
)

// TestC5OrphansCollected is docs/cases.md C5 (Mooncake #1139): a bucket file and an extent that no
// intent and no metadata reference are collected at start-up; no key is registered and the
// space accounting of live data is unchanged.
func TestC5OrphansCollected(t *testing.T) {
	dir := t.TempDir()
	n := mustOpen(t, testConfig(dir))
	keys := []string{keyOf("c5", 0), keyOf("c5", 1)}
	mustOffload(t, n, objects(1, 64<<10, keys...))
	before, _ := n.Buckets().Stats()
	keysBefore := n.FSM().Stats().Keys
	mustClose(t, n)

	bdir := filepath.Join(dir, "buckets")
	names := bucketFiles(t, bdir)
	src, err := os.ReadFile(filepath.Join(bdir, names[len(names)-1]))
	if err != nil {
		t.Fatal(err)
	}
	// An orphan bucket file: valid records that no metadata references.
	orphanFile := filepath.Join(bdir, "bucket-0000009999.kvb")
	if err := os.WriteFile(orphanFile, src, 0o640); err != nil {
		t.Fatal(err)
	}
	// An orphan extent: a valid record appended after the live ones of an existing bucket.
	f, err := os.OpenFile(filepath.Join(bdir, names[len(names)-1]), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(src); err != nil {
		t.Fatal(err)
	}
	f.Close()

	n = mustOpen(t, testConfig(dir))
	defer mustClose(t, n)
	_, rep := n.Recovery()
	if rep.OrphanBytes < int64(2*len(src)) {
		t.Fatalf("recovery freed %d orphan bytes, want >= %d", rep.OrphanBytes, 2*len(src))
	}
	if _, err := os.Stat(orphanFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("orphan bucket file still exists (err %v)", err)
	}
	after, _ := n.Buckets().Stats()
	if after.LiveBytes != before.LiveBytes {
		t.Fatalf("live bytes %d after collection, %d before", after.LiveBytes, before.LiveBytes)
	}
	if got := n.FSM().Stats().Keys; got != keysBefore {
		t.Fatalf("%d keys after collection, %d before", got, keysBefore)
	}
	checkReadable(t, n, 1, 64<<10, keys...)
	checkConsistent(t, n)
}

func bucketFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".kvb" {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatal("no bucket files")
	}
	return names
}

// TestC7RemovedKeyNeverReturns is docs/cases.md C7 (Mooncake #3220, #3160), first part: a removed
// key stays absent across a restart, in metadata and on disk, and a new offload of it serves
// the new bytes.
func TestC7RemovedKeyNeverReturns(t *testing.T) {
	dir := t.TempDir()
	n := mustOpen(t, testConfig(dir))
	k := keyOf("c7", 0)
	mustOffload(t, n, objects(1, 64<<10, k))
	res, err := n.Remove(context.Background(), []string{k})
	if err != nil || !res[0].Removed {
		t.Fatalf("remove: %v %+v", err, res)
	}
	mustClose(t, n)
	n = mustOpen(t, testConfig(dir))
	defer mustClose(t, n)
	if _, ok := n.FSM().Lookup(k); ok {
		t.Fatal("removed key is back in metadata after restart")
	}
	if c := recordsOnDisk(t, n, k); c != 0 {
		t.Fatalf("removed key has %d records on disk after restart", c)
	}
	if got, _ := n.BatchGet(context.Background(), []string{k}); got[0].Status != kvoffload.NotFound {
		t.Fatalf("get removed key: %s", got[0].Status)
	}
	mustOffload(t, n, objects(2, 64<<10, k))
	checkReadable(t, n, 2, 64<<10, k)
	checkConsistent(t, n)
}

// TestC11ExistsImpliesReadable is docs/cases.md C11 (Mooncake #3465): while offloads and removals
// run, every key BatchExists reports Present reads back with the bytes recorded at offload,
// unless it was removed in between; no read ever returns wrong bytes.
func TestC11ExistsImpliesReadable(t *testing.T) {
	seed := testkit.Seed(t)
	n := mustOpen(t, testConfig(t.TempDir()))
	defer mustClose(t, n)
	const size, total = 16 << 10, 400
	rng := rand.New(rand.NewPCG(seed, 11))
	removed := make(chan string, total)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < total; i += 8 {
			var keys []string
			for j := i; j < i+8; j++ {
				keys = append(keys, keyOf("c11", j))
			}
			mustOffload(t, n, objects(seed, size, keys...))
			victim := keys[rng.IntN(len(keys))]
			removed <- victim
			if _, err := n.Remove(context.Background(), []string{victim}); err != nil {
				t.Errorf("remove: %v", err)
				return
			}
		}
	}()
	gone := map[string]bool{}
	drain := func() {
		for {
			select {
			case k := <-removed:
				gone[k] = true
			default:
				return
			}
		}
	}
	bad := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		bad += existsButUnreadable(t, n, seed, size, total, gone, drain)
	}
	if bad != 0 {
		t.Fatalf("%d keys existed but were unreadable", bad)
	}
	checkConsistent(t, n)
}

// existsButUnreadable reads every key BatchExists reports Present. A NotFound is allowed only
// for a key whose removal had started by the time the read returned (drain learns of them).
func existsButUnreadable(t *testing.T, n *Node, seed uint64, size, total int, gone map[string]bool, drain func()) int {
	t.Helper()
	keys := make([]string, total)
	for i := range keys {
		keys[i] = keyOf("c11", i)
	}
	ex := mustExists(n.BatchExists(context.Background(), keys, 0))
	var present []string
	for i, p := range ex.Keys {
		if p == kvoffload.Present {
			present = append(present, keys[i])
		}
	}
	res, err := n.BatchGet(context.Background(), present)
	if err != nil {
		t.Fatal(err)
	}
	drain()
	bad := 0
	for _, r := range res {
		switch {
		case r.Status == kvoffload.Found:
			if string(r.Value) != string(objects(seed, size, r.Key)[0].Value) {
				t.Errorf("%s: wrong bytes", r.Key)
				bad++
			}
		case r.Status == kvoffload.NotFound && gone[r.Key]:
		default:
			t.Errorf("%s: present but %s %s", r.Key, r.Status, r.Reason)
			bad++
		}
	}
	return bad
}

// TestC12TornWALTail is docs/cases.md C12, WAL tail: torn and zero-filled tails are repaired at
// start-up and reported; every committed key survives.
func TestC12TornWALTail(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 12))
	for _, tc := range []struct {
		name   string
		damage func(path string, size int64) error
	}{
		// Cut 1..30 bytes: inside the last entry (a DONE entry is 35 bytes).
		{"truncate", func(p string, size int64) error { return os.Truncate(p, size-1-rng.Int64N(30)) }},
		{"zeros", func(p string, _ int64) error { return appendBytes(p, make([]byte, 1+rng.IntN(4096))) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			n := mustOpen(t, testConfig(dir))
			var keys []string
			for i := range 6 {
				keys = append(keys, keyOf("c12"+tc.name, i))
				mustOffload(t, n, objects(seed, 8<<10, keys[i]))
			}
			mustClose(t, n)
			seg := lastSegment(t, filepath.Join(dir, "wal"))
			st, _ := os.Stat(seg)
			if err := tc.damage(seg, st.Size()); err != nil {
				t.Fatal(err)
			}
			n = mustOpen(t, testConfig(dir))
			defer mustClose(t, n)
			if rep, _ := n.Recovery(); !rep.Repaired {
				t.Fatalf("WAL damage (%s) was not reported as repaired: %+v", tc.name, rep)
			}
			checkReadable(t, n, seed, 8<<10, keys...)
			checkConsistent(t, n)
		})
	}
}

// TestC12MidWALFlip: a flipped bit in the middle of the WAL stops start-up with an error naming
// the file and offset; nothing is truncated.
func TestC12MidWALFlip(t *testing.T) {
	dir := t.TempDir()
	n := mustOpen(t, testConfig(dir))
	for i := range 4 {
		mustOffload(t, n, objects(1, 8<<10, keyOf("flip", i)))
	}
	mustClose(t, n)
	seg := lastSegment(t, filepath.Join(dir, "wal"))
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	data[12] ^= 0x10 // inside the first entry's envelope; later entries stay valid
	if err := os.WriteFile(seg, data, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), testConfig(dir))
	var ce *wal.CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("open with a mid-log flip: err = %v, want a wal.CorruptError", err)
	}
	if ce.File == "" {
		t.Fatalf("corrupt error does not name the file: %v", err)
	}
	t.Logf("refused as expected: %v", err)
	after, _ := os.ReadFile(seg)
	if len(after) != len(data) {
		t.Fatalf("the WAL was truncated from %d to %d bytes", len(data), len(after))
	}
}

// TestC12BucketBitFlip: a flipped bit in a bucket record makes that key Corrupt once (at
// every position of the batch that names it), then NotFound (repaired in metadata); no other
// key is affected.
func TestC12BucketBitFlip(t *testing.T) {
	seed := testkit.Seed(t)
	dir := t.TempDir()
	n := mustOpen(t, testConfig(dir))
	keys := []string{keyOf("bf", 0), keyOf("bf", 1), keyOf("bf", 2)}
	mustOffload(t, n, objects(seed, 32<<10, keys...))
	victim, _ := n.FSM().Lookup(keys[1])
	mustClose(t, n)

	path := filepath.Join(dir, "buckets", bucketFiles(t, filepath.Join(dir, "buckets"))[0])
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 13))
	off := victim.Extent.Offset + rng.Int64N(int64(victim.Size)+64)
	data[off] ^= 1 << rng.IntN(8)
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
	n = mustOpen(t, testConfig(dir))
	defer mustClose(t, n)
	// The damaged key is named twice: both positions must say Corrupt, not the second
	// NotFound because the first removed the key (chaos seed 1796042550591936712).
	got, _ := n.BatchGet(context.Background(), append(keys, keys[1]))
	if got[1].Status != kvoffload.Corrupt || got[3].Status != kvoffload.Corrupt {
		t.Fatalf("flipped record named twice: %s and %s (%s), want Corrupt for both", got[1].Status, got[3].Status, got[3].Reason)
	}
	checkReadable(t, n, seed, 32<<10, keys[0], keys[2])
	if again, _ := n.BatchGet(context.Background(), keys[1:2]); again[0].Status != kvoffload.NotFound {
		t.Fatalf("after repair: %s, want NotFound", again[0].Status)
	}
	checkConsistent(t, n)
}

func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var segs []string
	for _, e := range ents {
		if len(e.Name()) == 20 {
			segs = append(segs, e.Name())
		}
	}
	if len(segs) == 0 {
		t.Fatal("no WAL segment")
	}
	sort.Strings(segs)
	return filepath.Join(dir, segs[len(segs)-1])
}

func appendBytes(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(b)
	return err
}

var _ = bucketstore.Alignment
