//go:build linux && (amd64 || arm64)

package vfs

import (
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

// aioMaxEvents bounds the events of all the AIO contexts this process keeps (each context of
// depth d reserves about 2d of the system's fs.aio-max-nr, 65536 by default, which other
// processes share); past it a ReadBatch uses goroutines.
const aioMaxEvents = 16384

// aioCtx is one io_setup(2) context and the slots of its reads.
type aioCtx struct {
	id    uintptr
	depth int
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

// aioPool keeps idle contexts by depth for reuse: io_setup and io_destroy are too slow to
// pay per batch, and contexts live as long as the process.
var aioPool struct {
	mu     sync.Mutex
	idle   map[int][]*aioCtx
	events int  // events reserved by contexts made so far
	off    bool // io_setup refused (ENOSYS, EPERM): not tried again
}

// getAIOCtx returns an idle context for depth reads (depth rounded up to a power of two, at
// least 32), or nil when AIO is unavailable or the event bound is reached.
func getAIOCtx(depth int) *aioCtx {
	size := 32
	for size < depth {
		size *= 2
	}
	aioPool.mu.Lock()
	defer aioPool.mu.Unlock()
	if aioPool.off {
		return nil
	}
	if free := aioPool.idle[size]; len(free) > 0 {
		c := free[len(free)-1]
		aioPool.idle[size] = free[:len(free)-1]
		return c
	}
	if aioPool.events+2*size > aioMaxEvents {
		return nil
	}
	var id uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(size), uintptr(unsafe.Pointer(&id)), 0); e != 0 {
		if e == unix.ENOSYS || e == unix.EPERM {
			aioPool.off = true
		}
		return nil
	}
	aioPool.events += 2 * size
	return &aioCtx{id: id, depth: size, slots: make([]aioSlot, size), cbs: make([]iocb, size), evs: make([]ioEvent, size)}
}

func putAIOCtx(c *aioCtx) {
	aioPool.mu.Lock()
	defer aioPool.mu.Unlock()
	if aioPool.idle == nil {
		aioPool.idle = map[int][]*aioCtx{}
	}
	aioPool.idle[c.depth] = append(aioPool.idle[c.depth], c)
}

// aioReadBatch is ReadBatch through native AIO. It returns false, having called neither
// callback, when no context is available.
func aioReadBatch(n, depth int, prep ReadPrep, done ReadDone) bool {
	c := getAIOCtx(depth)
	if c == nil {
		return false
	}
	defer putAIOCtx(c)
	var pin runtime.Pinner
	defer pin.Unpin()
	free := make([]int, 0, depth) // idle slot indexes
	for s := depth - 1; s >= 0; s-- {
		free = append(free, s)
	}
	batch := make([]*iocb, 0, depth)
	next, inFlight := 0, 0
	for next < n || inFlight > 0 {
		// Fill the free slots, then submit them, a run of one file per io_submit.
		batch = batch[:0]
		for next < n && len(free) > 0 {
			i := next
			next++
			f, p, off, ok := prep(i)
			if !ok {
				continue
			}
			of, isOS := f.(*osFile)
			if !isOS || len(p) == 0 {
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
			run := 1
			first := &c.slots[batch[0].data]
			file, err := first.f.fileFor(first.p, first.off, first.f.readAlign, first.f.readMemAlign)
			for run < len(batch) {
				sl := &c.slots[batch[run].data]
				g, _ := sl.f.fileFor(sl.p, sl.off, sl.f.readAlign, sl.f.readMemAlign)
				if g != file {
					break
				}
				run++
			}
			got := 0
			if err == nil {
				got, err = submit(c.id, file, batch[:run])
			}
			inFlight += got
			if err != nil {
				// Refused (EAGAIN with nothing in flight, EINVAL, EBADF...): read the first of the
				// rest synchronously, which reports the error as ReadAt would, and go on.
				s := int(batch[got].data)
				sl := c.slots[s]
				c.slots[s] = aioSlot{}
				free = append(free, s)
				readDirect(sl.i, sl.f, sl.p, sl.off, done)
				got++
			}
			batch = batch[got:]
		}
		if inFlight == 0 {
			continue
		}
		// Reap at least one completion.
		k, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, c.id, 1, uintptr(len(c.evs)), uintptr(unsafe.Pointer(&c.evs[0])), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			// Unreachable with a valid context; the reads in flight cannot be abandoned while the
			// kernel may still write their buffers, so wait for them one by one.
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

// readDirect is one read of a batch done synchronously with File.ReadAt.
func readDirect(i int, f File, p []byte, off int64, done ReadDone) {
	n, err := f.ReadAt(p, off)
	if err == nil && n < len(p) {
		err = io.ErrUnexpectedEOF
	}
	done(i, n, err)
}
