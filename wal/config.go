package wal

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/kvoffload/kvoffload/vfs"
)

const (
	// DefaultSegmentSize is the default target size of a segment file.
	DefaultSegmentSize = 64 << 20
	// DefaultMaxBatchRecords is the default cap on records per group commit.
	DefaultMaxBatchRecords = 4096
)

// Config configures a Log. A zero SegmentSize or MaxBatchRecords means the
// default; DefaultConfig fills them in explicitly.
type Config struct {
	// Dir is the directory of the log. Open creates it if missing. The
	// directory belongs to the Log: put no other files in it.
	Dir string
	// SegmentSize is the target size of a tidwall segment file in bytes; a
	// segment is closed once it reaches this size. Default 64 MiB. Open must
	// verify every segment, so keep the log short with TruncateFront.
	SegmentSize int
	// MaxBatchRecords caps the records that one group commit coalesces from
	// different calls. A single Append larger than this is still written as
	// one batch. It is also the number of queued AppendAsync records that
	// forces a commit on its own. Default 4096.
	MaxBatchRecords int
	// FS is the filesystem the log's files live on; nil is vfs.OSFS{}
	// (buffered I/O: each group commit ends with one fsync of the tail).
	FS vfs.FS
	// Logger receives the Log's messages; nil discards them. Levels: Error
	// for a fail-stop, Warn for a tail repair, Info for open/close and
	// finished truncations, Debug for TruncateFront.
	Logger *slog.Logger
}

// DefaultConfig returns a fresh Config for dir with every default filled in.
func DefaultConfig(dir string) Config {
	return Config{
		Dir:             dir,
		SegmentSize:     DefaultSegmentSize,
		MaxBatchRecords: DefaultMaxBatchRecords,
	}
}

// Validate reports every problem with c (joined with errors.Join).
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("wal: config: Dir is empty"))
	}
	if c.SegmentSize < 0 {
		errs = append(errs, fmt.Errorf("wal: config: SegmentSize %d is negative", c.SegmentSize))
	}
	if c.MaxBatchRecords < 0 {
		errs = append(errs, fmt.Errorf("wal: config: MaxBatchRecords %d is negative", c.MaxBatchRecords))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.SegmentSize == 0 {
		c.SegmentSize = DefaultSegmentSize
	}
	if c.MaxBatchRecords == 0 {
		c.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.FS == nil {
		c.FS = vfs.OSFS{}
	}
	return c
}
