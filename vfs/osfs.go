package vfs

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// OSFS is the real (Linux) filesystem. With DirectIO, files are opened with O_DIRECT; when
// the filesystem refuses O_DIRECT (e.g. EINVAL on an old tmpfs) it falls back to buffered I/O
// and logs that once per process. On an O_DIRECT file, a WriteAt that is not
// DirectIOAlignment-aligned (offset, length and buffer address), or a ReadAt that is not
// aligned to the file's DirectReadAlignment (offset and length; buffer address: the kernel's
// memory alignment), goes through a second, buffered descriptor of the same file, so callers
// need not know about the mode (DirectIO reports it).
// Sync uses fdatasync, PunchHole uses fallocate(PUNCH_HOLE|KEEP_SIZE), Lock uses
// flock(LOCK_EX|LOCK_NB).
type OSFS struct {
	DirectIO bool
	// Logger receives the one-time O_DIRECT fallback warning; nil means slog.Default().
	Logger *slog.Logger
}

var directFallbackLogged atomic.Bool

// OpenFile implements FS.
func (o OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	flag |= unix.O_CLOEXEC
	if o.DirectIO {
		f, err := os.OpenFile(name, flag|unix.O_DIRECT, perm)
		if err == nil {
			return newOSFile(f, flag, true), nil
		}
		if !errors.Is(err, unix.EINVAL) {
			return nil, err
		}
		if !directFallbackLogged.Swap(true) {
			o.logger().Warn("vfs: O_DIRECT refused, using buffered I/O", "file", name, "err", err)
		}
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return newOSFile(f, flag, false), nil
}

func (o OSFS) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// Rename implements FS.
func (OSFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// MkdirAll implements FS.
func (OSFS) MkdirAll(path string, perm os.FileMode) error { return os.MkdirAll(path, perm) }

// ReadDir implements FS.
func (OSFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

// SyncDir implements FS.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// Lock implements FS.
func (OSFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, name)
		}
		return nil, fmt.Errorf("vfs: flock %s: %w", name, err)
	}
	return f, nil
}

// osFile is an *os.File plus, for O_DIRECT files, a lazily opened buffered twin.
type osFile struct {
	f      *os.File
	fd     int
	flag   int
	direct bool

	readAlign    int64 // offset and length alignment of a direct ReadAt
	readMemAlign int64 // buffer address alignment of a direct ReadAt

	once     sync.Once
	buffered *os.File
	bufErr   error
}

func newOSFile(f *os.File, flag int, direct bool) *osFile {
	of := &osFile{f: f, fd: int(f.Fd()), flag: flag, direct: direct,
		readAlign: DirectIOAlignment, readMemAlign: DirectIOAlignment}
	if direct {
		of.readAlign, of.readMemAlign = dioReadAlignment(of.fd)
	}
	return of
}

// dioReadAlignment returns the offset and memory alignment of O_DIRECT reads of fd that the
// kernel reports (statx STATX_DIOALIGN, Linux 6.1 and later), each at most DirectIOAlignment;
// DirectIOAlignment for what it does not report.
func dioReadAlignment(fd int) (offset, mem int64) {
	var st unix.Statx_t
	err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st)
	if err != nil || st.Mask&unix.STATX_DIOALIGN == 0 {
		return DirectIOAlignment, DirectIOAlignment
	}
	pick := func(a uint32) int64 {
		if a == 0 || a > DirectIOAlignment || DirectIOAlignment%a != 0 {
			return DirectIOAlignment
		}
		return int64(a)
	}
	return pick(st.Dio_offset_align), pick(st.Dio_mem_align)
}

func (f *osFile) ReadAt(p []byte, off int64) (int, error) {
	file, err := f.fileFor(p, off, f.readAlign, f.readMemAlign)
	if err != nil {
		return 0, err
	}
	return file.ReadAt(p, off)
}

func (f *osFile) WriteAt(p []byte, off int64) (int, error) {
	file, err := f.fileFor(p, off, DirectIOAlignment, DirectIOAlignment)
	if err != nil {
		return 0, err
	}
	return file.WriteAt(p, off)
}

// fileFor returns the descriptor for an I/O of p at off: the O_DIRECT one when the I/O is
// aligned to align (memory: memAlign) or the file is buffered anyway, else a buffered twin
// opened on first use through /proc/self/fd, which works even after the name was removed.
func (f *osFile) fileFor(p []byte, off, align, memAlign int64) (*os.File, error) {
	if !f.direct || ioAligned(p, off, align, memAlign) {
		return f.f, nil
	}
	f.once.Do(func() {
		flag := f.flag &^ (os.O_CREATE | os.O_EXCL | os.O_TRUNC)
		f.buffered, f.bufErr = os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.fd), flag, 0)
	})
	return f.buffered, f.bufErr
}

func (f *osFile) Sync() error { return os.NewSyscallError("fdatasync", unix.Fdatasync(f.fd)) }

func (f *osFile) Truncate(size int64) error { return f.f.Truncate(size) }

func (f *osFile) Size() (int64, error) {
	st, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (f *osFile) PunchHole(off, length int64) error {
	if length <= 0 {
		return nil
	}
	mode := uint32(unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE)
	return os.NewSyscallError("fallocate", unix.Fallocate(f.fd, mode, off, length))
}

func (f *osFile) AllocatedBytes() (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return 0, os.NewSyscallError("fstat", err)
	}
	return st.Blocks * 512, nil
}

func (f *osFile) Close() error {
	var err error
	if f.buffered != nil {
		err = f.buffered.Close()
	}
	return errors.Join(f.f.Close(), err)
}

// Allocate implements Allocator with fallocate(2), mode 0.
func (f *osFile) Allocate(off, length int64) error {
	return os.NewSyscallError("fallocate", unix.Fallocate(f.fd, 0, off, length))
}

// FreeBytes implements Allocator with fstatfs(2): the bytes an unprivileged writer may still
// allocate on the file's filesystem (f_bavail x f_bsize).
func (f *osFile) FreeBytes() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(f.fd, &st); err != nil {
		return 0, os.NewSyscallError("fstatfs", err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

var _ Allocator = (*osFile)(nil)

// FreeSpace implements SpaceReporter with statfs(2): f_bavail x f_bsize of the filesystem
// holding path.
func (OSFS) FreeSpace(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

var _ SpaceReporter = OSFS{}
