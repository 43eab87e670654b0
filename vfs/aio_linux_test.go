//go:build linux && (amd64 || arm64)

package vfs

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// staleEvents waits a moment for reads in flight to land, then counts the completions
// waiting in the idle contexts of the pool (a context goes back idle only with none).
func staleEvents() int {
	time.Sleep(20 * time.Millisecond)
	aioPool.mu.Lock()
	defer aioPool.mu.Unlock()
	n := 0
	for _, c := range aioPool.idle {
		var ts unix.Timespec
		k, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, c.id, 0, uintptr(len(c.evs)), uintptr(unsafe.Pointer(&c.evs[0])), uintptr(unsafe.Pointer(&ts)), 0)
		if e == 0 {
			n += int(k)
		}
	}
	return n
}

// needAIO skips t where native AIO is not available (io_setup refused).
func needAIO(t *testing.T) {
	t.Helper()
	c, _ := getAIOCtx(32)
	if c == nil {
		t.Skip("native AIO is not available here (io_setup refused)")
	}
	putAIOCtx(c)
}

// TestReadBatchUsesAIO checks that a batch on an OSFS goes through native AIO on this
// machine, keeps at most depth reads in flight, and that concurrent batches share pooled
// contexts instead of making one each time.
func TestReadBatchUsesAIO(t *testing.T) {
	f, want := batchFile(t, 1, 1<<20)
	needAIO(t)
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

// TestReadBatchStartsBeforeItsFill checks that a batch's first read is on the device before
// the rest of its first depth reads are prepared: prep(1) waits (up to 5 s) for read 0's bytes
// to land in its buffer, which they never do if nothing was submitted yet.
func TestReadBatchStartsBeforeItsFill(t *testing.T) {
	f, want := batchFile(t, 1, 64<<10)
	needAIO(t)
	bufs := make([][]byte, 16)
	landed := false
	ReadBatch(OSFS{DirectIO: true}, len(bufs), 16, func(i int) (File, []byte, int64, bool) {
		bufs[i] = AlignedBuffer(4096)
		if i == 0 {
			for k := range bufs[0] {
				bufs[0][k] = ^want[k] // differs from the file in every byte until the read lands
			}
		}
		if i == 1 {
			for deadline := time.Now().Add(5 * time.Second); !landed && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				landed = string(bufs[0]) == string(want[:4096])
			}
		}
		return f, bufs[i], int64(i) * 4096, true
	}, func(i, n int, err error) {
		if err != nil || string(bufs[i]) != string(want[i*4096:(i+1)*4096]) {
			t.Errorf("read %d: n %d err %v or wrong bytes", i, n, err)
		}
	})
	if !landed {
		t.Error("read 0 had not landed 5 s after it was prepared: the batch waited for its whole fill before submitting")
	}
}

// TestAIOPoolBestFit checks that a batch takes the smallest idle context large enough for
// its depth, so idle small contexts never keep a deeper batch off AIO.
func TestAIOPoolBestFit(t *testing.T) {
	small, _ := getAIOCtx(32)
	big, _ := getAIOCtx(256)
	if small == nil || big == nil {
		t.Skip("native AIO is not available here (io_setup refused)")
	}
	putAIOCtx(small)
	putAIOCtx(big)
	c1, _ := getAIOCtx(100)
	c2, _ := getAIOCtx(10)
	if c1 == nil || c1.size != 256 {
		t.Fatalf("depth 100 with idle contexts of 32 and 256 events got %v, want one of 256", c1)
	}
	if c2 == nil || c2.size != 32 {
		t.Fatalf("depth 10 with an idle context of 32 events got %v, want it", c2)
	}
	putAIOCtx(c1)
	putAIOCtx(c2)
}

// TestAIOPoolAtItsBound checks what a batch gets once the pool's event bound is reached:
// the largest idle context when one is idle, even if smaller than asked, and, with every
// context in use, no context (busy), so that ReadBatch reads on the calling goroutine, one
// read at a time; such a batch still reads every byte right, and a read started from inside
// a read's callback does not wait for the batch that holds the context.
func TestAIOPoolAtItsBound(t *testing.T) {
	var held []*aioCtx
	defer func() {
		for _, c := range held {
			putAIOCtx(c)
		}
	}()
	for {
		aioPool.mu.Lock()
		full := aioPool.events+32 > aioMaxEvents && len(aioPool.idle) == 0
		aioPool.mu.Unlock()
		if full {
			break
		}
		c, _ := getAIOCtx(32)
		if c == nil {
			t.Skip("native AIO is not available here, or the system's aio-max-nr is reached")
		}
		held = append(held, c)
	}
	if c, busy := getAIOCtx(32); c != nil || !busy {
		t.Fatalf("with every context in use: %v, busy %v; want none, busy", c, busy)
	}
	putAIOCtx(held[0])
	held = held[1:]
	c, busy := getAIOCtx(256)
	if c == nil || busy || c.size != 32 {
		t.Fatalf("a deep batch at the bound with one idle context of 32 events got %v, busy %v", c, busy)
	}
	held = append(held, c)
	f, want := batchFile(t, 5, 1<<20)
	var inner, outer atomic.Int64
	ReadBatch(OSFS{DirectIO: true}, 16, 8, func(i int) (File, []byte, int64, bool) {
		return f, AlignedBuffer(4096), int64(i) * 4096, true
	}, func(i, n int, err error) {
		outer.Add(1)
		if err != nil || n != 4096 {
			t.Errorf("read %d past the bound: n %d, %v", i, n, err)
		}
		if i == 0 { // a read from inside a callback, with no context to be had
			buf := AlignedBuffer(4096)
			ReadBatch(OSFS{DirectIO: true}, 1, 1, func(int) (File, []byte, int64, bool) { return f, buf, 8192, true },
				func(_, n int, err error) {
					if err == nil && string(buf) == string(want[8192:12288]) {
						inner.Add(1)
					}
				})
		}
	})
	if outer.Load() != 16 || inner.Load() != 1 {
		t.Fatalf("past the bound: %d of 16 reads done, the nested read done %d times", outer.Load(), inner.Load())
	}
}
