package vfs

import (
	"errors"
	"io"
	"os"
)

// ErrLocked reports that FS.Lock found the lock held (by this or another process, or, on
// memfs, by this FS value). It is wrapped with the lock file's name.
var ErrLocked = errors.New("vfs: lock held")

// FS is the filesystem seam of the bucket store. Every method may be called concurrently.
// Names are plain paths; implementations clean them.
type FS interface {
	// OpenFile opens (and with os.O_CREATE creates) a regular file. A created name is
	// durable only after SyncDir of its directory.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove unlinks a file. The removal is durable only after SyncDir of its directory.
	Remove(name string) error
	// Rename moves a file to newname, replacing any file there, atomically (rename(2)).
	// The move is durable only after SyncDir of both directories; until then a crash
	// leaves the old name, the new one's previous file, or both as they were durable.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(path string, perm os.FileMode) error
	// ReadDir returns the entry names of dir, sorted.
	ReadDir(dir string) ([]string, error)
	// SyncDir makes the creations and removals of entries in dir durable.
	SyncDir(dir string) error
	// Lock takes an exclusive, non-blocking lock on name (created if needed). It returns
	// ErrLocked if the lock is held. Closing the returned Closer releases the lock.
	Lock(name string) (io.Closer, error)
}

// File is an open file. ReadAt and WriteAt may be called concurrently on disjoint ranges.
// With OSFS{DirectIO: true}, I/O whose offset, length and buffer address are multiples of
// DirectIOAlignment bypasses the page cache (AlignedBuffer returns such a buffer).
type File interface {
	io.ReaderAt
	io.WriterAt
	// Sync makes every completed write, truncate and punch of this file durable
	// (fdatasync). After a failed Sync the file's durable content is unknown.
	Sync() error
	// Truncate sets the file size.
	Truncate(size int64) error
	// Size returns the current file size.
	Size() (int64, error)
	// PunchHole frees the blocks of [off, off+length); later reads there return zeros and
	// the file size is unchanged. Partially covered blocks are zeroed, not freed.
	PunchHole(off, length int64) error
	// AllocatedBytes returns the bytes really allocated to the file (st_blocks*512).
	AllocatedBytes() (int64, error)
	// Close releases the file.
	Close() error
}

// Compile-time checks that OSFS satisfies the seam (vfs/memfs and vfs/errorfs check theirs).
var (
	_ FS   = OSFS{}
	_ File = (*osFile)(nil)
)

// Allocator is an optional File capability: allocate [off, off+length) so that writes there
// do not extend the file (fallocate mode 0; the file size grows to cover the range and the
// new range reads as zeros).
type Allocator interface {
	Allocate(off, length int64) error
	// FreeBytes returns the bytes still free on the file's filesystem, so that an allocation
	// ahead can leave room for the files that must not run out of it (the WAL, the Raft log).
	FreeBytes() (int64, error)
}

// SpaceReporter is an optional FS capability: the free space of the filesystem that holds a
// path, so that the bucket store can leave a reserve for the files that must not run out of
// it (the WAL, the Raft log and its snapshots).
type SpaceReporter interface {
	// FreeSpace returns the bytes an unprivileged writer may still allocate on the filesystem
	// holding path (statfs(2): f_bavail x f_bsize). Errors are the statfs error.
	FreeSpace(path string) (int64, error)
}
