package bucketstore

import (
	"errors"
	"fmt"
)

var (
	// ErrCorrupt reports a record that failed verification: bad magic, version, lengths,
	// checksums, non-zero padding, or a field that differs from what the caller expected.
	// Use IsCorrupt to classify; the wrapped message carries the detail.
	ErrCorrupt = errors.New("bucketstore: corrupt record")
	// ErrLocked reports that another Store (in this or another process) holds Dir/LOCK; Open
	// wraps it around the FS's vfs.ErrLocked.
	ErrLocked = errors.New("bucketstore: directory locked by another store")
	// ErrNoSpace reports that a Reserve would push live+reserved bytes past Config.Capacity.
	ErrNoSpace = errors.New("bucketstore: capacity exceeded")
	// ErrDiskFull reports that a reservation would leave less free space on the filesystem
	// than Config.Reserve; the error is a *DiskFullError.
	ErrDiskFull = errors.New("bucketstore: no space left for data above the reserve")
	// ErrTooLarge reports a Reserve larger than Config.BucketSize.
	ErrTooLarge = errors.New("bucketstore: record larger than bucket size")
	// ErrSyncFailed reports a failed fdatasync (or directory fsync). It is sticky: the bucket
	// is never synced again and its records must be treated as lost.
	ErrSyncFailed = errors.New("bucketstore: sync failed")
	// ErrNotLive reports a Free of an extent the accounting does not hold (freed already,
	// collected as an orphan, or in a bucket that no longer exists).
	ErrNotLive = errors.New("bucketstore: not a live extent")
	// ErrPayloadChanged reports a record not written because its payload, as copied into the
	// record buffer, does not have the checksum its header was given: the caller changed it
	// after hashing it (EncodeRecord).
	ErrPayloadChanged = errors.New("bucketstore: payload changed after it was hashed")
	// ErrClosed reports use of a Store after Close.
	ErrClosed = errors.New("bucketstore: store closed")
)

// IsCorrupt reports whether err says that on-disk bytes failed verification.
// Recovery code should use it instead of matching strings.
func IsCorrupt(err error) bool { return errors.Is(err, ErrCorrupt) }

// DiskFullError is the refusal of a reservation that would take the free space the WAL and
// the Raft log need. It names the free space and the reserve, in bytes, and unwraps to
// ErrDiskFull.
type DiskFullError struct {
	Size    int64 // the bytes asked for
	Free    int64 // the filesystem's free bytes (statfs), less the bytes reserved but not yet written
	Reserve int64 // Config.Reserve
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("no space for data: %d bytes asked, %d bytes free on the data filesystem, reserve %d bytes (for the WAL and the Raft log)",
		e.Size, max(e.Free, 0), e.Reserve)
}

func (e *DiskFullError) Unwrap() error { return ErrDiskFull }
