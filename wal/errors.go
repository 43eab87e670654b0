package wal

import (
	"errors"
	"fmt"
)

var (
	// ErrCorrupt reports damage that Open must not repair: a bad entry in an
	// older segment, a gap between segments, or a bad entry in the last segment
	// that is followed by a valid one. Every *CorruptError unwraps to it.
	ErrCorrupt = errors.New("wal: corrupt log")

	// ErrFailed reports that the Log is fail-stopped: a write, fsync or
	// truncation failed earlier (or in this call). The Log is never retried;
	// close it and restart the process, which recovers from what is on disk.
	// Errors that wrap ErrFailed also wrap the original cause.
	ErrFailed = errors.New("wal: log failed")

	// ErrNotTruncated reports a TruncateFront that found no room (ENOSPC,
	// EDQUOT) for the copy of the segment that is to start the log (tidwall's
	// .START file) and so changed nothing: the Log is unchanged and usable, and
	// the truncation may be tried again once there is room.
	ErrNotTruncated = errors.New("wal: not truncated")

	// ErrClosed reports a call on a Log after Close.
	ErrClosed = errors.New("wal: log closed")

	// ErrInvalidRecord reports a Record that cannot be encoded (unknown type,
	// oversized payload) or bytes that are not a valid envelope.
	ErrInvalidRecord = errors.New("wal: invalid record")
)

// CorruptError names the damage: file and byte offset (and the entry index
// when known; 0 means unknown, since indexes start at 1).
type CorruptError struct {
	File   string // path of the segment file
	Offset int64  // byte offset of the damaged entry within File; -1 if unknown
	Index  uint64 // index of the damaged entry; 0 if unknown
	Reason string // what is wrong
}

// Error implements error.
func (e *CorruptError) Error() string {
	msg := fmt.Sprintf("wal: corrupt log: %s at offset %d", e.File, e.Offset)
	if e.Index != 0 {
		msg += fmt.Sprintf(" (index %d)", e.Index)
	}
	return msg + ": " + e.Reason
}

// Unwrap returns ErrCorrupt, so errors.Is(err, ErrCorrupt) holds.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// IsCorrupt reports whether err is (or wraps) a corruption report. Recovery
// code uses it instead of matching strings.
func IsCorrupt(err error) bool { return errors.Is(err, ErrCorrupt) }

// failedError builds the fail-stop error: it wraps ErrFailed and the cause.
func failedError(op string, cause error) error {
	return fmt.Errorf("%w: %s: %w", ErrFailed, op, cause)
}
