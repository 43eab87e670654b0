package bucketstore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/vfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

const testDir = "/data"

// memConfig is a small-bucket config on fsys (a fresh memfs.FS when nil).
func memConfig(fsys vfs.FS) Config {
	if fsys == nil {
		fsys = memfs.New()
	}
	return Config{Dir: testDir, FS: fsys, BucketSize: 64 * Alignment}
}

// mustOpen opens cfg and closes the store when the test ends (a test may close it first).
func mustOpen(tb testing.TB, cfg Config) *Store {
	tb.Helper()
	s, err := Open(cfg)
	testkit.Must(tb, err, "Open")
	testkit.CloseAtEnd(tb, s, ErrClosed)
	return s
}

func mustClose(tb testing.TB, s *Store) {
	tb.Helper()
	testkit.Must(tb, s.Close(), "Close")
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
	payload := testkit.Payload(gen, n)
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
