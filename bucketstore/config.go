package bucketstore

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/kvoffload/kvoffload/vfs"
)

// DefaultBucketSize is the bucket file size past which the store rolls to a new file.
const DefaultBucketSize = 1 << 30

// Config configures a Store. The zero values of FS, BucketSize and Logger select defaults.
type Config struct {
	// Dir holds the bucket files and the LOCK file. Required.
	Dir string
	// FS is the filesystem; nil means vfs.OSFS{DirectIO: true}.
	FS vfs.FS
	// BucketSize is the size past which Reserve rolls to a new bucket file; a multiple of
	// Alignment. 0 means DefaultBucketSize. Reserves larger than it fail with ErrTooLarge.
	BucketSize int64
	// Capacity is the quota on live plus reserved bytes; 0 means unlimited.
	Capacity int64
	// Reserve is the free space, in bytes, that Reserve and ReserveRun never take from the
	// filesystem holding Dir: the room the WAL, the Raft log and its snapshots need on it. A
	// reservation that would leave less free fails with a *DiskFullError (ErrDiskFull), and
	// allocating ahead stops short of it. It is checked with the FS's vfs.SpaceReporter; an
	// FS without one, or 0, leaves the free space unchecked. Store.SetReserve changes it.
	Reserve int64
	// Logger receives Info (open, collect), Debug (roll, remove) and Error (sync failure)
	// events. nil discards.
	Logger *slog.Logger
}

// DefaultConfig returns a fresh Config for dir with every default spelled out.
func DefaultConfig(dir string) Config {
	return Config{Dir: dir, FS: vfs.OSFS{DirectIO: true}, BucketSize: DefaultBucketSize}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("bucketstore: config: Dir is empty"))
	}
	if c.BucketSize < 0 || c.BucketSize%Alignment != 0 {
		errs = append(errs, fmt.Errorf("bucketstore: config: BucketSize %d is not a non-negative multiple of %d",
			c.BucketSize, Alignment))
	}
	if c.Capacity < 0 {
		errs = append(errs, fmt.Errorf("bucketstore: config: Capacity %d is negative", c.Capacity))
	}
	if c.Reserve < 0 {
		errs = append(errs, fmt.Errorf("bucketstore: config: Reserve %d is negative", c.Reserve))
	}
	return errors.Join(errs...)
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Logger = c.Logger.With("pkg", "bucketstore")
	if c.FS == nil {
		c.FS = vfs.OSFS{DirectIO: true, Logger: c.Logger}
	}
	if c.BucketSize == 0 {
		c.BucketSize = DefaultBucketSize
	}
	return c
}
