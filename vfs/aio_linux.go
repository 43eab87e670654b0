//go:build linux && (amd64 || arm64)

package vfs

import (
	"errors"
	"io"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// iocb is struct iocb of linux/aio_abi.h on a little-endian machine (aio_key before
// aio_rw_flags), 64 bytes.
type iocb struct {
	data    uint64 // aio_data: the slot index, echoed in the event
	key     uint32
	rwFlags uint32
	opcode  uint16 // IOCB_CMD_PREAD
	reqprio int16
	fd      uint32
	buf     uint64
	nbytes  uint64
	offset  int64
	_       uint64 // aio_reserved2
	flags   uint32
	resfd   uint32
}

// ioEvent is struct io_event of linux/aio_abi.h, 32 bytes.
type ioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

const iocbCmdPread = 0

var (
	_ [64 - unsafe.Sizeof(iocb{})]byte
	_ [unsafe.Sizeof(iocb{}) - 64]byte
	_ [32 - unsafe.Sizeof(ioEvent{})]byte
)

// aioMaxEvents bounds the events of all the AIO contexts this process keeps: the kernel
// charges a context its size against the system's fs.aio-max-nr (65536 by default, shared
// with other processes), so this is a quarter of the default. Past it a batch reads one read
// at a time (getAIOCtx).
const aioMaxEvents = 16384

// aioCtx is one io_setup(2) context and the slots of its reads.
type aioCtx struct {
	id    uintptr
	size  int // events
	slots []aioSlot
	cbs   []iocb
	evs   []ioEvent
}

// aioSlot is one read in flight: its index in the batch, file and buffer (referenced, and
// pinned, until its event is reaped).
type aioSlot struct {
	i   int
	f   *osFile
	p   []byte
	off int64
}

// aioPool keeps idle contexts for reuse: io_setup and io_destroy are too slow to pay per
// batch, and contexts live as long as the process.
var aioPool struct {
	mu     sync.Mutex
	idle   []*aioCtx
	events int  // events of the contexts that exist
	off    bool // io_setup or io_submit refused outright (ENOSYS, EPERM): not tried again
}

// getAIOCtx returns a context for depth reads: the smallest idle one that is large enough,
// else a new one of depth rounded up to a power of two (at least 32), else, at the event
// bound, the largest idle one (smaller than asked: the batch keeps fewer reads in flight).
// It returns nil when AIO is unavailable, and nil with busy when every context of the bound
// is in use: the caller then reads on its own goroutine, one read at a time, so that a batch
// past the bound holds one thread as a batch on AIO does, rather than one per read in flight
// (thousands of threads under a read storm), and never waits for another batch (whose
// callback might be the one asking). TestAIOPoolAtItsBound guards it.
func getAIOCtx(depth int) (c *aioCtx, busy bool) {
	aioPool.mu.Lock()
	defer aioPool.mu.Unlock()
	if aioPool.off {
		return nil, false
	}
	best, largest := -1, -1
	for k, c := range aioPool.idle {
		if c.size >= depth && (best < 0 || c.size < aioPool.idle[best].size) {
			best = k
		}
		if largest < 0 || c.size > aioPool.idle[largest].size {
			largest = k
		}
	}
	size := 32
	for size < depth {
		size *= 2
	}
	if best < 0 && aioPool.events+size > aioMaxEvents {
		best = largest // -1 when none is idle
		if best < 0 {
			return nil, true
		}
	}
	if best >= 0 {
		c := aioPool.idle[best]
		aioPool.idle = append(aioPool.idle[:best], aioPool.idle[best+1:]...)
		return c, false
	}
	var id uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(size), uintptr(unsafe.Pointer(&id)), 0); e != 0 {
		if e == unix.ENOSYS || e == unix.EPERM {
			aioPool.off = true
		}
		return nil, false
	}
	aioPool.events += size
	return &aioCtx{id: id, size: size, slots: make([]aioSlot, size), cbs: make([]iocb, size), evs: make([]ioEvent, size)}, false
}

// putAIOCtx returns a context with nothing in flight to the pool.
func putAIOCtx(c *aioCtx) {
	aioPool.mu.Lock()
	defer aioPool.mu.Unlock()
	aioPool.idle = append(aioPool.idle, c)
}

// dropAIOCtx destroys a context whose batch did not finish (a callback panicked): io_destroy
// waits for the reads still in flight, so no buffer is written after it returns and no late
// event reaches another batch.
func dropAIOCtx(c *aioCtx) {
	unix.Syscall(unix.SYS_IO_DESTROY, c.id, 0, 0)
	aioPool.mu.Lock()
	defer aioPool.mu.Unlock()
	aioPool.events -= c.size
}

// aioRefused reports whether an io_submit error means AIO is not allowed here at all.
func aioRefused(err error) bool {
	return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM)
}

// aioReadBatch is ReadBatch through native AIO. It returns false, having called neither
// callback, when AIO is unavailable. When every context of the pool's bound is in use it
// reads the batch on the calling goroutine, one read at a time (getAIOCtx). Reads it cannot
// submit (a file that is not the OSFS's own or not O_DIRECT, an unaligned read: AIO would do
// those inside io_submit anyway) are read synchronously on the calling goroutine; if
// io_submit is refused outright, the reads not yet named go to goroutines.
func aioReadBatch(n, depth int, prep ReadPrep, done ReadDone) bool {
	c, busy := getAIOCtx(depth)
	if busy {
		readParallel(n, 1, prep, done)
		return true
	}
	if c == nil {
		return false
	}
	depth = min(depth, c.size)
	var pin runtime.Pinner
	finished := false
	defer func() {
		if finished {
			putAIOCtx(c)
		} else {
			dropAIOCtx(c)
		}
		pin.Unpin() // after io_destroy: the kernel may write a pinned buffer until then
	}()
	free := make([]int, 0, depth) // idle slot indexes
	for s := depth - 1; s >= 0; s-- {
		free = append(free, s)
	}
	batch := make([]*iocb, 0, depth)
	next, inFlight, refused := 0, 0, false
	for (next < n && !refused) || inFlight > 0 {
		// Fill free slots, then submit them, a run of one file per io_submit. A submission
		// holds at most as many reads as are in flight already (1, 1, 2, 4, ... as a batch
		// starts), so the device starts on the first read while the rest are prepared:
		// preparing 32 fresh 256 KiB buffers before the first io_submit left the disk idle
		// for 1.7 ms of a 28 ms batch (docs/benchmarks.md).
		batch = batch[:0]
		for next < n && !refused && len(free) > 0 && len(batch) < max(1, inFlight) {
			i := next
			next++
			f, p, off, ok := prep(i)
			if !ok {
				continue
			}
			of, isOS := f.(*osFile)
			if !isOS || !of.direct || len(p) == 0 || !ioAligned(p, off, of.readAlign, of.readMemAlign) {
				readDirect(i, f, p, off, done)
				continue
			}
			s := free[len(free)-1]
			free = free[:len(free)-1]
			pin.Pin(unsafe.SliceData(p))
			c.slots[s] = aioSlot{i: i, f: of, p: p, off: off}
			c.cbs[s] = iocb{data: uint64(s), opcode: iocbCmdPread, buf: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p)))), nbytes: uint64(len(p)), offset: off}
			batch = append(batch, &c.cbs[s])
		}
		for len(batch) > 0 {
			file := c.slots[batch[0].data].f
			run := 1
			for run < len(batch) && c.slots[batch[run].data].f == file {
				run++
			}
			got, err := submit(c.id, file.f, batch[:run])
			inFlight += got
			if err != nil {
				// Refused: read the first of the rest synchronously, which reports what ReadAt
				// would, and go on; if AIO is not allowed at all, stop naming new reads.
				if aioRefused(err) {
					refused = true
					aioPool.mu.Lock()
					aioPool.off = true
					aioPool.mu.Unlock()
				}
				s := int(batch[got].data)
				sl := c.slots[s]
				c.slots[s] = aioSlot{}
				free = append(free, s)
				readDirect(sl.i, sl.f, sl.p, sl.off, done)
				got++
			}
			batch = batch[got:]
		}
		if inFlight == 0 || (next < n && !refused && len(free) > 0) {
			continue // more to submit before waiting for a completion
		}
		// Reap at least one completion.
		k, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, c.id, 1, uintptr(len(c.evs)), uintptr(unsafe.Pointer(&c.evs[0])), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			// Unreachable with a valid context. The reads in flight cannot be abandoned while
			// the kernel may still write their buffers: the deferred io_destroy waits for them.
			panic("vfs: io_getevents: " + e.Error())
		}
		for _, ev := range c.evs[:k] {
			s := int(ev.data)
			sl := c.slots[s]
			c.slots[s] = aioSlot{}
			free = append(free, s)
			inFlight--
			finish(sl, ev.res, done)
		}
	}
	finished = true
	if next < n {
		readParallel(n-next, depth, func(i int) (File, []byte, int64, bool) { return prep(next + i) },
			func(i, m int, err error) { done(next+i, m, err) })
	}
	return true
}

// submit issues cbs, all reads of file, with io_submit(2) while holding file's descriptor (so
// a concurrent Close cannot release the number under the call; once submitted, the kernel
// holds the file itself). It returns how many were submitted; err is set when that is fewer.
func submit(ctx uintptr, file *os.File, cbs []*iocb) (int, error) {
	raw, err := file.SyscallConn()
	if err != nil {
		return 0, err
	}
	got := 0
	var e syscall.Errno
	cerr := raw.Control(func(fd uintptr) {
		for _, cb := range cbs {
			cb.fd = uint32(fd)
		}
		for got < len(cbs) {
			r, _, en := unix.Syscall(unix.SYS_IO_SUBMIT, ctx, uintptr(len(cbs)-got), uintptr(unsafe.Pointer(&cbs[got])))
			if en == unix.EINTR {
				continue
			}
			if en != 0 {
				e = en
				return
			}
			if r == 0 {
				e = unix.EAGAIN
				return
			}
			got += int(r)
		}
	})
	if cerr != nil {
		return got, cerr
	}
	if e == unix.EAGAIN && got == 0 {
		// The kernel's queue is full: the caller reads this one synchronously.
		return 0, e
	}
	if e != 0 {
		return got, &os.PathError{Op: "io_submit", Path: file.Name(), Err: e}
	}
	return got, nil
}

// finish reports a reaped read: res bytes, or -errno. A short read is completed with ReadAt
// (which reaches the end of the file or the error), as File.ReadAt would have.
func finish(sl aioSlot, res int64, done ReadDone) {
	switch {
	case res < 0:
		done(sl.i, 0, &os.PathError{Op: "read", Path: sl.f.f.Name(), Err: syscall.Errno(-res)})
	case int(res) < len(sl.p):
		m, err := sl.f.ReadAt(sl.p[res:], sl.off+res)
		if err == nil && int(res)+m < len(sl.p) {
			err = io.ErrUnexpectedEOF
		}
		done(sl.i, int(res)+m, err)
	default:
		done(sl.i, len(sl.p), nil)
	}
}
