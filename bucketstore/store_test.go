package bucketstore

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// storeBackends runs a test on memfs.FS and on vfs.OSFS (O_DIRECT on t.TempDir).
func storeBackends(t *testing.T, fn func(t *testing.T, cfg Config)) {
	t.Run("MemFS", func(t *testing.T) { fn(t, memConfig(nil)) })
	t.Run("OSFS", func(t *testing.T) {
		cfg := DefaultConfig(t.TempDir())
		cfg.BucketSize = 64 * Alignment
		fn(t, cfg)
	})
}

func TestStoreWriteReadReopen(t *testing.T) {
	storeBackends(t, func(t *testing.T, cfg Config) {
		s := mustOpen(t, cfg)
		var ws []written
		for i, n := range []int{0, 100, 64 << 10, 100 << 10, 3 * Alignment} {
			ws = append(ws, mustPut(t, s, strings.Repeat("k", i+1), uint64(i), n))
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			mustRead(t, s, w)
		}
		mustClose(t, s)
		s = mustOpen(t, cfg)
		for _, w := range ws {
			mustRead(t, s, w)
		}
		old := s.Buckets()
		w := mustPut(t, s, "new", 99, 10)
		if w.ext.Bucket <= slices.Max(old) || w.ext.Offset != 0 {
			t.Fatalf("new record at %+v: must start a fresh bucket after %v", w.ext, old)
		}
		if err := s.WriteRecord(ws[0].ext, ws[0].h, ws[0].payload); err == nil {
			t.Fatal("WriteRecord into a previous run's bucket succeeded")
		}
	})
}

func TestStoreReadVerifies(t *testing.T) {
	cfg := memConfig(nil)
	s := mustOpen(t, cfg)
	a, b := mustPut(t, s, "a", 1, 5000), mustPut(t, s, "b", 2, 5000)
	cases := []struct {
		name string
		ext  Extent
		want func(h Header) Header
	}{
		{"key", a.ext, func(h Header) Header { h.Key = "z"; return h }},
		{"txn", a.ext, func(h Header) Header { h.TxnID[3]++; return h }},
		{"generation", a.ext, func(h Header) Header { h.Generation++; return h }},
		{"payload length", a.ext, func(h Header) Header { h.PayloadLen++; return h }},
		{"payload sum", a.ext, func(h Header) Header { h.PayloadSum++; return h }},
		{"other record's extent", b.ext, func(h Header) Header { return h }},
		{"extent too short", Extent{Bucket: a.ext.Bucket, Offset: 0, Length: Alignment}, func(h Header) Header { return h }},
		{"past end of file", Extent{Bucket: a.ext.Bucket, Offset: 1 << 20, Length: a.ext.Length}, func(h Header) Header { return h }},
		{"missing bucket", Extent{Bucket: 77, Offset: 0, Length: a.ext.Length}, func(h Header) Header { return h }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Read(tc.ext, tc.want(a.h)); !IsCorrupt(err) {
				t.Fatalf("Read: %v, want ErrCorrupt", err)
			}
		})
	}
	flipByte(t, cfg.FS, bucketPath(testDir, b.ext.Bucket), b.ext.Offset+3000)
	if _, err := s.Read(b.ext, b.h); !IsCorrupt(err) {
		t.Fatalf("Read of flipped record: %v, want ErrCorrupt", err)
	}
	mustRead(t, s, a)
}

func TestStoreReserve(t *testing.T) {
	cfg := memConfig(nil)
	cfg.BucketSize = 4 * Alignment
	s := mustOpen(t, cfg)
	e1, err := s.Reserve(3 * Alignment)
	if err != nil {
		t.Fatal(err)
	}
	e2, err := s.Reserve(3 * Alignment)
	if err != nil {
		t.Fatal(err)
	}
	if e1.Bucket == e2.Bucket || e2.Offset != 0 {
		t.Fatalf("no roll: %+v then %+v", e1, e2)
	}
	if _, err := s.Reserve(5 * Alignment); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized Reserve: %v, want ErrTooLarge", err)
	}
	for _, n := range []int64{0, -Alignment, 100} {
		if _, err := s.Reserve(n); err == nil {
			t.Fatalf("Reserve(%d) succeeded", n)
		}
	}
	checkAccounting(t, s, map[Extent]bool{e1: true, e2: true})
}

// TestFreeNotLive: freeing an extent twice, or one in a bucket that no longer exists, is
// ErrNotLive (recovery's deferred frees rely on it to stay quiet), and changes no accounting.
func TestFreeNotLive(t *testing.T) {
	s := mustOpen(t, memConfig(nil))
	e, err := s.Reserve(Alignment)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Free(e); err != nil {
		t.Fatal(err)
	}
	if err := s.Free(e); !errors.Is(err, ErrNotLive) {
		t.Fatalf("second Free: %v, want ErrNotLive", err)
	}
	if err := s.Free(Extent{Bucket: e.Bucket + 7, Offset: 0, Length: Alignment}); !errors.Is(err, ErrNotLive) {
		t.Fatalf("Free in a missing bucket: %v, want ErrNotLive", err)
	}
	checkAccounting(t, s, map[Extent]bool{})
}

func TestStoreCapacity(t *testing.T) {
	cfg := memConfig(nil)
	cfg.Capacity = 8 * Alignment
	s := mustOpen(t, cfg)
	var exts []Extent
	for {
		e, err := s.Reserve(3 * Alignment)
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		exts = append(exts, e)
	}
	if len(exts) != 2 {
		t.Fatalf("%d reserves fit in 8 blocks of capacity, want 2", len(exts))
	}
	if err := s.Free(exts[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(3 * Alignment); err != nil {
		t.Fatalf("Reserve after Free: %v", err)
	}
	if err := s.Free(exts[0]); err == nil {
		t.Fatal("double Free succeeded")
	}
}

func TestStoreLocked(t *testing.T) {
	storeBackends(t, func(t *testing.T, cfg Config) {
		mustOpen(t, cfg)
		if _, err := Open(cfg); !errors.Is(err, ErrLocked) {
			t.Fatalf("second Open: %v, want ErrLocked", err)
		}
	})
}

func TestStoreClosed(t *testing.T) {
	s := mustOpen(t, memConfig(nil))
	w := mustPut(t, s, "k", 1, 10)
	mustClose(t, s)
	checks := map[string]error{
		"Reserve": func() error { _, err := s.Reserve(Alignment); return err }(),
		"Write":   s.WriteRecord(w.ext, w.h, w.payload),
		"Read":    func() error { _, err := s.Read(w.ext, w.h); return err }(),
		"Sync":    s.Sync(),
		"Free":    s.Free(w.ext),
		"Stats":   func() error { _, err := s.Stats(); return err }(),
		"Close":   s.Close(),
	}
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{BucketSize: 100, Capacity: -1}.Validate()
	for _, want := range []string{"Dir", "BucketSize", "Capacity"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %v does not mention %s", err, want)
		}
	}
	if err := DefaultConfig("/x").Validate(); err != nil {
		t.Fatalf("DefaultConfig invalid: %v", err)
	}
}

func TestStoreFreeRemovesEmptySealedBucket(t *testing.T) {
	m := memfs.New()
	cfg := memConfig(m)
	cfg.BucketSize = 4 * Alignment
	s := mustOpen(t, cfg)
	a, b := mustPut(t, s, "a", 1, 10), mustPut(t, s, "b", 2, 10)
	c := mustPut(t, s, "c", 3, 3*Alignment) // rolls to bucket 2
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []written{a, b} {
		if err := s.Free(w.ext); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Buckets(); !slices.Equal(got, []uint32{c.ext.Bucket}) {
		t.Fatalf("Buckets = %v, want only %d", got, c.ext.Bucket)
	}
	if names, _ := m.Crash(memfs.CrashDropAll, testkit.Rand(t)).ReadDir(testDir); slices.Contains(names, bucketName(a.ext.Bucket)) {
		t.Fatal("removed bucket survives a crash: directory not synced")
	}
	if err := s.Free(c.ext); err != nil { // the open bucket stays
		t.Fatal(err)
	}
	if len(s.Buckets()) != 1 {
		t.Fatal("open bucket removed")
	}
	checkAccounting(t, s, nil)
}

// TestStoreAccountingRandom runs random Reserve/Write/Free/Sync, checking LiveBytes after
// every step, then reopens, adopts and collects, checking AllocatedBytes == live bytes.
func TestStoreAccountingRandom(t *testing.T) {
	rng := testkit.Rand(t)
	cfg := memConfig(nil)
	cfg.BucketSize = 16 * Alignment
	s := mustOpen(t, cfg)
	live := map[Extent]written{}
	model := func() map[Extent]bool {
		m := map[Extent]bool{}
		for e := range live {
			m[e] = true
		}
		return m
	}
	for i := range 400 {
		switch r := rng.IntN(10); {
		case r < 6 || len(live) == 0:
			w := mustPut(t, s, "k", uint64(i), rng.IntN(5*Alignment))
			live[w.ext] = w
		case r < 9:
			e := randomKey(rng, live)
			if err := s.Free(e); err != nil {
				t.Fatalf("Free %+v: %v", e, err)
			}
			delete(live, e)
		default:
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		checkAccounting(t, s, model())
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = mustOpen(t, cfg)
	byBucket := map[uint32][]Extent{}
	for e, w := range live {
		if err := s.Adopt(e); err != nil {
			t.Fatal(err)
		}
		byBucket[e.Bucket] = append(byBucket[e.Bucket], e)
		mustRead(t, s, w)
	}
	checkAccounting(t, s, model())
	for _, id := range s.Buckets() {
		if _, err := s.Collect(id, byBucket[id]); err != nil {
			t.Fatalf("Collect %d: %v", id, err)
		}
	}
	checkAccounting(t, s, model())
	if st := mustStats(t, s); st.AllocatedBytes != st.LiveBytes {
		t.Fatalf("after Collect: allocated %d, live %d", st.AllocatedBytes, st.LiveBytes)
	}
	for _, w := range live {
		mustRead(t, s, w)
	}
}

func randomKey[V any](rng interface{ IntN(int) int }, m map[Extent]V) Extent {
	keys := make([]Extent, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Extent) int {
		if a.Bucket != b.Bucket {
			return int(a.Bucket) - int(b.Bucket)
		}
		return int(a.Offset - b.Offset)
	})
	return keys[rng.IntN(len(keys))]
}
