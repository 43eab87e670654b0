// Package errorfs wraps a vfs.FS and injects errors for tests: before each operation, FS asks
// an Injector whether it fails. FailNth, OnName and Any build the usual injectors. Hooks
// add short writes and changed or failed reads.
package errorfs

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/kvoffload/kvoffload/vfs"
)

// Op names the kind of filesystem operation an Injector is asked about.
type Op int

// Operation kinds seen by an Injector. MkdirAll, ReadDir, Lock, Size, AllocatedBytes and
// Close are never injected.
const (
	OpOpen Op = iota
	OpRead
	OpWrite
	OpSync
	OpSyncDir
	OpRemove
	OpTruncate
	OpPunch
	OpRename
)

var opNames = [...]string{"open", "read", "write", "sync", "syncdir", "remove", "truncate", "punch", "rename"}

func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Injector decides, before each operation, whether it fails: a non-nil error is returned
// instead of doing the operation. It must be safe for concurrent use.
type Injector func(op Op, name string) error

// FS wraps a vfs.FS and asks its Injector before every operation. An injected OpWrite
// error writes nothing; Hooks.Write makes short writes. An injected error is returned as is,
// unwrapped.
type FS struct {
	inner  vfs.FS
	inject Injector
	hooks  Hooks
}

// Hooks are faults other than an error instead of the whole call. Each is asked only about
// a call its Injector let through, and must be safe for concurrent use.
type Hooks struct {
	// Read, if set, sees each read's result: p[:n] holds the bytes read and err the read's
	// error. It returns the result the caller gets, and may change p[:n] first (a bit
	// flipped between the disk and memory) or fail the read (EIO).
	Read func(name string, p []byte, off int64, n int, err error) (int, error)
	// Write, if set, is asked before each write of p at off. A nil err passes the write
	// whole. Otherwise only p[:keep] reaches the file (keep is clamped to [0, len(p)]) and
	// the caller gets (min(n, keep), err): a short write reports n = keep, a write that
	// stored part and reports nothing n = 0.
	Write func(name string, p []byte, off int64) (keep, n int, err error)
}

// Compile-time checks that FS satisfies the seam.
var (
	_ vfs.FS   = (*FS)(nil)
	_ vfs.File = (*errorFile)(nil)
)

// Wrap returns an FS that injects the errors inject chooses into inner.
func Wrap(inner vfs.FS, inject Injector) *FS {
	return &FS{inner: inner, inject: inject}
}

// WrapHooks is Wrap with the faults of h too.
func WrapHooks(inner vfs.FS, inject Injector, h Hooks) *FS {
	return &FS{inner: inner, inject: inject, hooks: h}
}

// FailNth fails the n-th (1-based) operation of kind op with err; all others pass.
func FailNth(op Op, n int, err error) Injector {
	var count atomic.Int64
	return func(o Op, _ string) error {
		if o == op && count.Add(1) == int64(n) {
			return err
		}
		return nil
	}
}

// OnName restricts inj to operations whose name satisfies match; the others pass and are
// not seen (or counted) by inj.
func OnName(match func(name string) bool, inj Injector) Injector {
	return func(op Op, name string) error {
		if !match(name) {
			return nil
		}
		return inj(op, name)
	}
}

// Any asks each injector in order and returns the first error. Every injector before the
// failing one sees the operation.
func Any(injs ...Injector) Injector {
	return func(op Op, name string) error {
		for _, inj := range injs {
			if err := inj(op, name); err != nil {
				return err
			}
		}
		return nil
	}
}

// OpenFile implements vfs.FS.
func (e *FS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if err := e.inject(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &errorFile{File: f, name: name, inject: e.inject, hooks: e.hooks}, nil
}

// Remove implements vfs.FS.
func (e *FS) Remove(name string) error {
	if err := e.inject(OpRemove, name); err != nil {
		return err
	}
	return e.inner.Remove(name)
}

// Rename implements vfs.FS; the Injector is asked with the old name.
func (e *FS) Rename(oldname, newname string) error {
	if err := e.inject(OpRename, oldname); err != nil {
		return err
	}
	return e.inner.Rename(oldname, newname)
}

// MkdirAll implements vfs.FS.
func (e *FS) MkdirAll(path string, perm os.FileMode) error { return e.inner.MkdirAll(path, perm) }

// ReadDir implements vfs.FS.
func (e *FS) ReadDir(dir string) ([]string, error) { return e.inner.ReadDir(dir) }

// SyncDir implements vfs.FS.
func (e *FS) SyncDir(dir string) error {
	if err := e.inject(OpSyncDir, dir); err != nil {
		return err
	}
	return e.inner.SyncDir(dir)
}

// Lock implements vfs.FS.
func (e *FS) Lock(name string) (io.Closer, error) { return e.inner.Lock(name) }

type errorFile struct {
	vfs.File
	name   string
	inject Injector
	hooks  Hooks
}

func (f *errorFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.inject(OpRead, f.name); err != nil {
		return 0, err
	}
	n, err := f.File.ReadAt(p, off)
	if f.hooks.Read != nil {
		return f.hooks.Read(f.name, p, off, n, err)
	}
	return n, err
}

func (f *errorFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.inject(OpWrite, f.name); err != nil {
		return 0, err
	}
	if f.hooks.Write != nil {
		if keep, n, err := f.hooks.Write(f.name, p, off); err != nil {
			keep = max(0, min(keep, len(p)))
			if keep > 0 {
				if _, werr := f.File.WriteAt(p[:keep], off); werr != nil {
					return 0, werr
				}
			}
			return max(0, min(n, keep)), err
		}
	}
	return f.File.WriteAt(p, off)
}

func (f *errorFile) Sync() error {
	if err := f.inject(OpSync, f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *errorFile) Truncate(size int64) error {
	if err := f.inject(OpTruncate, f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *errorFile) PunchHole(off, length int64) error {
	if err := f.inject(OpPunch, f.name); err != nil {
		return err
	}
	return f.File.PunchHole(off, length)
}
