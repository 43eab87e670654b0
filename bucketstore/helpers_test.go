package bucketstore

import (
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/vfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

var (
	seedFlag   = flag.Uint64("seed", 0, "seed for randomized tests (0 = current time)")
	updateFlag = flag.Bool("update", false, "rewrite the golden files in testdata/")
)

// testRand returns a seeded generator and logs the seed so that a failure can be replayed.
func testRand(tb testing.TB) *rand.Rand {
	tb.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	tb.Logf("seed %d (replay with -seed=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

const testDir = "/data"

// memConfig is a small-bucket config on fsys (a fresh memfs.FS when nil).
func memConfig(fsys vfs.FS) Config {
	if fsys == nil {
		fsys = memfs.New()
	}
	return Config{Dir: testDir, FS: fsys, BucketSize: 64 * Alignment}
}

func mustOpen(tb testing.TB, cfg Config) *Store {
	tb.Helper()
	s, err := Open(cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

func mustClose(tb testing.TB, s *Store) {
	tb.Helper()
	if err := s.Close(); err != nil {
		tb.Fatalf("Close: %v", err)
	}
}

// testPayload returns n bytes derived from seed.
func testPayload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func testHeader(key string, gen uint64, payload []byte) Header {
	var txn [16]byte
	copy(txn[:], key)
	txn[15] = byte(gen)
	return NewHeader(key, txn, gen, payload)
}

// written is a record the test wrote, with what Read must return.
type written struct {
	ext     Extent
	h       Header
	payload []byte
}

func mustPut(tb testing.TB, s *Store, key string, gen uint64, n int) written {
	tb.Helper()
	payload := testPayload(gen, n)
	h := testHeader(key, gen, payload)
	ext, err := s.Reserve(RecordSize(len(key), n))
	if err != nil {
		tb.Fatalf("Reserve: %v", err)
	}
	if err := s.WriteRecord(ext, h, payload); err != nil {
		tb.Fatalf("WriteRecord: %v", err)
	}
	return written{ext: ext, h: h, payload: payload}
}

func mustRead(tb testing.TB, s *Store, w written) {
	tb.Helper()
	got, err := s.Read(w.ext, w.h)
	if err != nil {
		tb.Fatalf("Read %+v: %v", w.ext, err)
	}
	if string(got) != string(w.payload) {
		tb.Fatalf("Read %+v: payload differs", w.ext)
	}
}

func mustStats(tb testing.TB, s *Store) Stats {
	tb.Helper()
	st, err := s.Stats()
	if err != nil {
		tb.Fatalf("Stats: %v", err)
	}
	return st
}

// checkAccounting asserts the store invariant LiveBytes == sum of live extents, both against
// the caller's model and against the per-bucket bookkeeping.
func checkAccounting(tb testing.TB, s *Store, live map[Extent]bool) {
	tb.Helper()
	var want int64
	for e := range live {
		want += e.Length
	}
	s.mu.Lock()
	var perBucket int64
	for _, b := range s.buckets {
		var sum int64
		b.live.lengths(func(n int64) { sum += n })
		if sum != b.liveBytes {
			tb.Errorf("bucket %d: liveBytes %d, extents sum %d", b.id, b.liveBytes, sum)
		}
		perBucket += sum
	}
	s.mu.Unlock()
	if st := mustStats(tb, s); st.LiveBytes != want || perBucket != want {
		tb.Fatalf("LiveBytes %d, per-bucket %d, model %d", st.LiveBytes, perBucket, want)
	}
}

// bucketPath returns the path of bucket id of a store in dir.
func bucketPath(dir string, id uint32) string { return filepath.Join(dir, bucketName(id)) }

// flipByte xors one byte of a file through fsys.
func flipByte(tb testing.TB, fsys vfs.FS, path string, off int64) {
	tb.Helper()
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		tb.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		tb.Fatal(err)
	}
}
