package vfs

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("vfs.seed", 0, "seed of the randomized vfs tests (0: from the clock)")

func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -vfs.seed=%d)", seed, seed)
	return seed
}

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
	want := testPayload(seed, size)
	buf := AlignedBuffer(size)
	copy(buf, want)
	mustWriteAt(t, f, buf, 0)
	return f, want
}

// TestReadBatchMatchesReadAt reads random ranges (aligned and not, some past the end, some
// skipped) through ReadBatch on both paths and at several depths, and checks every byte and
// every outcome against the file's content.
func TestReadBatchMatchesReadAt(t *testing.T) {
	seed := testSeed(t)
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

// TestReadBatchUsesAIO checks that a batch on an OSFS goes through native AIO on this
// machine, keeps at most depth reads in flight, and that concurrent batches share pooled
// contexts instead of making one each time.
func TestReadBatchUsesAIO(t *testing.T) {
	f, want := batchFile(t, 1, 1<<20)
	c := getAIOCtx(32)
	if c == nil {
		t.Skip("native AIO is not available here (io_setup refused)")
	}
	putAIOCtx(c)
	batch := func(depth int) (maxInFlight int) {
		inFlight := 0
		bufs := make([][]byte, 64)
		ReadBatch(OSFS{DirectIO: true}, len(bufs), depth, func(i int) (File, []byte, int64, bool) {
			inFlight++ // the AIO path calls prep and done from one goroutine
			maxInFlight = max(maxInFlight, inFlight)
			bufs[i] = AlignedBuffer(4096)
			return f, bufs[i], int64(i) * 4096, true
		}, func(i, n int, err error) {
			inFlight--
			if err != nil || string(bufs[i]) != string(want[i*4096:(i+1)*4096]) {
				t.Errorf("read %d: n %d err %v or wrong bytes", i, n, err)
			}
		})
		return maxInFlight
	}
	if got := batch(8); got > 8 {
		t.Errorf("%d reads in flight at depth 8", got)
	}
	aioPool.mu.Lock()
	before := aioPool.events
	aioPool.mu.Unlock()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				batch(32)
			}
		}()
	}
	wg.Wait()
	aioPool.mu.Lock()
	after := aioPool.events
	aioPool.mu.Unlock()
	if after-before > 8*2*32 {
		t.Errorf("160 batches from 8 goroutines reserved %d more events: contexts are not reused", after-before)
	}
}

// TestReadBatchClosedFile checks that a batch on a closed file reports the error per read
// instead of reading another file that reused the descriptor.
func TestReadBatchClosedFile(t *testing.T) {
	f, _ := batchFile(t, 1, 1<<20)
	f.Close()
	for _, fs := range []FS{OSFS{DirectIO: true}, plainFS{}} {
		errs := 0
		ReadBatch(fs, 4, 4, func(i int) (File, []byte, int64, bool) {
			return f, AlignedBuffer(4096), int64(i) * 4096, true
		}, func(i, n int, err error) {
			if err == nil || n != 0 {
				t.Errorf("%T: read %d of a closed file: n %d, err %v", fs, i, n, err)
			}
			errs++
		})
		if errs != 4 {
			t.Errorf("%T: %d of 4 reads reported", fs, errs)
		}
	}
}
