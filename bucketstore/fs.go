package bucketstore

import (
	"io"
	"os"
)

// FS is the filesystem seam of the store. Every method may be called concurrently.
// Names are plain paths; implementations clean them.
type FS interface {
	// OpenFile opens (and with os.O_CREATE creates) a regular file. A created name is
	// durable only after SyncDir of its directory.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove unlinks a file. The removal is durable only after SyncDir of its directory.
	Remove(name string) error
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
// Alignment bypasses the page cache.
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

// Compile-time checks that every implementation satisfies the seam.
var (
	_ FS   = OSFS{}
	_ FS   = (*MemFS)(nil)
	_ FS   = (*ErrorFS)(nil)
	_ File = (*osFile)(nil)
	_ File = (*memFile)(nil)
	_ File = (*errorFile)(nil)
)

// Allocator is an optional File capability: allocate [off, off+length) so that writes there
// do not extend the file (fallocate mode 0; the file size grows to cover the range and the
// new range reads as zeros).
type Allocator interface {
	Allocate(off, length int64) error
}
