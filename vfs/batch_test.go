package vfs

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// plainFS is OSFS under another type, so that ReadBatch takes its goroutine path on the same
// files.
type plainFS struct{ OSFS }

// batchFile creates a direct-I/O file of size bytes derived from seed and returns it with its
// content.
func batchFile(t *testing.T, seed uint64, size int) (File, []byte) {
	t.Helper()
	f, err := OSFS{DirectIO: true}.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	want := testkit.Payload(seed, size)
	buf := AlignedBuffer(size)
	copy(buf, want)
	mustWriteAt(t, f, buf, 0)
	return f, want
}

// TestReadBatchMatchesReadAt reads random ranges (aligned and not, some past the end, some
// skipped) through ReadBatch on both paths and at several depths, and checks every byte and
// every outcome against the file's content.
func TestReadBatchMatchesReadAt(t *testing.T) {
	seed := testkit.Seed(t)
	const size = 4 << 20
	f, want := batchFile(t, seed, size)
	rng := rand.New(rand.NewPCG(seed, 2))
	for _, fs := range []FS{OSFS{DirectIO: true}, plainFS{}} {
		for _, depth := range []int{1, 7, 32, 300} {
			t.Run(fmt.Sprintf("%T/depth=%d", fs, depth), func(t *testing.T) {
				const n = 500
				type read struct {
					p    []byte
					off  int64
					skip bool
				}
				reads := make([]read, n)
				for i := range reads {
					length := (1 + rng.IntN(64)) * 4096
					off := int64(rng.IntN(size/4096)) * 4096
					r := read{off: off, skip: rng.IntN(10) == 0}
					switch rng.IntN(4) {
					case 0: // unaligned: served from the buffered twin
						r.off += int64(1 + rng.IntN(100))
						r.p = make([]byte, length-rng.IntN(100))
					case 1: // runs past the end of the file
						r.off = size - int64(length/2)
						r.p = AlignedBuffer(length)
					default:
						r.p = AlignedBuffer(length)
					}
					reads[i] = r
				}
				var mu sync.Mutex
				seen := make([]int, n)
				prepped := make([]int, n)
				ReadBatch(fs, n, depth, func(i int) (File, []byte, int64, bool) {
					mu.Lock()
					prepped[i]++
					mu.Unlock()
					return f, reads[i].p, reads[i].off, !reads[i].skip
				}, func(i, got int, err error) {
					mu.Lock()
					seen[i]++
					mu.Unlock()
					r := reads[i]
					wantN := min(len(r.p), max(0, size-int(r.off)))
					if got != wantN {
						t.Errorf("read %d (%d bytes at %d): n = %d, want %d", i, len(r.p), r.off, got, wantN)
						return
					}
					if wantN < len(r.p) && !errors.Is(err, io.EOF) {
						t.Errorf("read %d past the end: err = %v, want io.EOF", i, err)
					}
					if wantN == len(r.p) && err != nil {
						t.Errorf("read %d: %v", i, err)
					}
					if string(r.p[:got]) != string(want[r.off:r.off+int64(got)]) {
						t.Errorf("read %d (%d bytes at %d): wrong bytes", i, len(r.p), r.off)
					}
				})
				for i, r := range reads {
					wantSeen := 1
					if r.skip {
						wantSeen = 0
					}
					if prepped[i] != 1 || seen[i] != wantSeen {
						t.Fatalf("read %d: prep called %d times, done %d times (skip %v)", i, prepped[i], seen[i], r.skip)
					}
				}
			})
		}
	}
}

// TestReadBatchClosedFile checks that a batch on a closed file reports the error per read
// instead of reading another file that reused the descriptor.
func TestReadBatchClosedFile(t *testing.T) {
	f, _ := batchFile(t, 1, 1<<20)
	f.Close()
	for _, fs := range []FS{OSFS{DirectIO: true}, plainFS{}} {
		var errs atomic.Int64
		ReadBatch(fs, 4, 4, func(i int) (File, []byte, int64, bool) {
			return f, AlignedBuffer(4096), int64(i) * 4096, true
		}, func(i, n int, err error) {
			if err == nil || n != 0 {
				t.Errorf("%T: read %d of a closed file: n %d, err %v", fs, i, n, err)
			}
			errs.Add(1)
		})
		if errs.Load() != 4 {
			t.Errorf("%T: %d of 4 reads reported", fs, errs.Load())
		}
	}
}

// TestReadBatchSurvivesAPanickingCallback checks that a batch whose prep panics with reads
// in flight does not leave them to the next batch: its context is destroyed (io_destroy
// waits for them), and the next batch gets every read exactly once with the right bytes.
func TestReadBatchSurvivesAPanickingCallback(t *testing.T) {
	const block, blocks = 256 << 10, 64 // reads long enough to be in flight when prep panics
	f, want := batchFile(t, 3, block*blocks)
	read := func(panicAt int) (seen []int, bad int) {
		seen = make([]int, 2*blocks)
		bufs := make([][]byte, len(seen))
		defer func() { recover() }()
		ReadBatch(OSFS{DirectIO: true}, len(seen), 32, func(i int) (File, []byte, int64, bool) {
			if i == panicAt { // the reads named before it are in flight
				panic("callback bug")
			}
			bufs[i] = AlignedBuffer(block)
			return f, bufs[i], int64(i%blocks) * block, true
		}, func(i, n int, err error) {
			seen[i]++
			if err != nil || string(bufs[i]) != string(want[(i%blocks)*block:(i%blocks+1)*block]) {
				bad++
			}
		})
		return seen, bad
	}
	for range 3 {
		read(33)
		seen, bad := read(-1)
		for i, k := range seen {
			if k != 1 {
				t.Fatalf("after a panicking batch, read %d was done %d times", i, k)
			}
		}
		if bad > 0 {
			t.Fatalf("after a panicking batch, %d reads had wrong bytes or errors", bad)
		}
		if k := staleEvents(); k > 0 {
			t.Fatalf("%d completions of earlier batches wait in idle contexts for the next batch", k)
		}
	}
}

// TestReadBatchBufferedKeepsReadsInFlight checks that without O_DIRECT, where Linux would do
// each AIO read inside io_submit, a batch still has several reads in flight at once.
func TestReadBatchBufferedKeepsReadsInFlight(t *testing.T) {
	f, err := OSFS{}.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mustWriteAt(t, f, testkit.Payload(1, 1<<20), 0)
	var mu sync.Mutex
	inFlight, most := 0, 0
	ReadBatch(OSFS{}, 64, 8, func(i int) (File, []byte, int64, bool) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		time.Sleep(time.Millisecond) // a slow read
		return f, make([]byte, 4096), int64(i) * 4096, true
	}, func(i, n int, err error) {
		mu.Lock()
		inFlight--
		mu.Unlock()
	})
	if most < 2 {
		t.Fatalf("at most %d read in flight at depth 8 on a buffered file", most)
	}
}
