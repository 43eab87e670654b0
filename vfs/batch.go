package vfs

import (
	"io"
	"sync"
	"sync/atomic"
)

// ReadPrep names read i of a ReadBatch: the file, the buffer to fill and the offset. ok false
// skips read i (its done is not called); the callback has answered for it itself.
type ReadPrep func(i int) (f File, p []byte, off int64, ok bool)

// ReadDone receives the outcome of read i of a ReadBatch as File.ReadAt would give it: n
// bytes read into p, and err non-nil when n < len(p) (io.EOF at the end of the file).
type ReadDone func(i, n int, err error)

// MaxBatchDepth is the most reads a ReadBatch keeps in flight; a larger depth is clamped.
const MaxBatchDepth = 256

// ReadBatch performs reads 0..n-1 with up to depth in flight on the device and returns once
// every read prep named is done. prep(i) is called once per i, just before read i is issued
// (so a buffer or a pin it takes is held only while the read is in flight), in roughly
// increasing i; done(i, ...) once per read prep named, as it completes, in any order. Either
// may be called from several goroutines at once, but never for the same i at the same time.
//
// On an OSFS with DirectIO (fs is OSFS or *OSFS) the reads go through Linux native AIO
// (io_submit(2), io_getevents(2)), as fio's libaio engine does: one goroutine submits and
// reaps, so depth reads are in the kernel at once without a thread and a scheduler round trip
// per read (on the 2-core VMs a blocking pread per goroutine reached about 40% of fio's 4 KiB
// random-read IOPS; docs/benchmarks.md); prep and done are then called on the calling
// goroutine, so a done that blocks holds up the reads not yet submitted. A read AIO would do
// synchronously anyway (unaligned, on a file without O_DIRECT or not the OSFS's own) is read
// with ReadAt on that goroutine. Where AIO is not available (kernel, seccomp, aio-max-nr),
// without O_DIRECT, and on any other FS (memfs, errorfs), the reads are plain File.ReadAt
// calls from depth goroutines. Every buffer must stay untouched until its done.
func ReadBatch(fs FS, n, depth int, prep ReadPrep, done ReadDone) {
	depth = max(1, min(depth, MaxBatchDepth, n))
	if n <= 0 {
		return
	}
	var direct bool
	switch o := fs.(type) {
	case OSFS:
		direct = o.DirectIO
	case *OSFS:
		direct = o.DirectIO
	}
	// Without O_DIRECT (asked for or refused by the filesystem), Linux does an AIO read inside
	// io_submit, one at a time: goroutines keep several in flight instead.
	if direct && !directFallbackLogged.Load() && aioReadBatch(n, depth, prep, done) {
		return
	}
	readParallel(n, depth, prep, done)
}

// readParallel is ReadBatch with depth goroutines each taking the next read and calling
// File.ReadAt (the calling goroutine is one of them).
func readParallel(n, depth int, prep ReadPrep, done ReadDone) {
	var next atomic.Int64
	read := func() {
		for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
			readOne(i, prep, done)
		}
	}
	var wg sync.WaitGroup
	for range depth - 1 {
		wg.Add(1)
		go func() { defer wg.Done(); read() }()
	}
	read()
	wg.Wait()
}

// readOne is read i of a batch done synchronously with File.ReadAt.
func readOne(i int, prep ReadPrep, done ReadDone) {
	if f, p, off, ok := prep(i); ok {
		readDirect(i, f, p, off, done)
	}
}

// readDirect is read i, named, done synchronously with File.ReadAt.
func readDirect(i int, f File, p []byte, off int64, done ReadDone) {
	n, err := f.ReadAt(p, off)
	if err == nil && n < len(p) {
		err = io.ErrUnexpectedEOF
	}
	done(i, n, err)
}
