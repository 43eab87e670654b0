package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/mutant"
	tidwall "github.com/kvoffload/kvoffload/third_party/tidwall/wal"
)

// Stats counts the Log's work since Open.
type Stats struct {
	Appends uint64 // Append and AppendAsync calls whose records were written
	Records uint64 // records written
	Batches uint64 // group commits = tidwall WriteBatch calls = segment fsyncs
}

// Log is an open intent log. Its methods are safe for concurrent use; see the
// package doc for the contract.
type Log struct {
	cfg    Config
	dir    string // absolute
	logger *slog.Logger
	tw     *tidwall.Log
	disk   disk

	// truncMu serialises TruncateFront, Close's release of tw, and the
	// committer's look at the tail segment after a rotation.
	truncMu sync.Mutex

	mu         sync.Mutex
	cond       *sync.Cond // signalled when the queue or closing changes
	queue      []*request // waiting for the committer, in index order
	queuedRecs int        // records in queue
	waiters    int        // requests in queue that a caller waits on
	next       uint64     // index the next queued record gets
	first      uint64     // durable first index
	last       uint64     // durable last index (first-1 when empty)
	failErr    error      // non-nil once fail-stopped; wraps ErrFailed
	closing    bool
	stats      Stats

	stopped chan struct{} // closed when the committer exits
	// tailBytes is the committer's estimate (never too small) of the size of
	// the last segment; only the committer touches it after Open.
	tailBytes int
}

// Open verifies the log in cfg.Dir, repairs a torn tail (see RepairReport),
// opens it and starts the committer. A *CorruptError means damage Open will
// not repair.
func Open(cfg Config) (*Log, RepairReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, RepairReport{}, err
	}
	cfg = cfg.withDefaults()
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, RepairReport{}, fmt.Errorf("wal: open: %w", err)
	}
	logger := cfg.Logger.With(slog.String("component", "wal"), slog.String("dir", dir))
	d := disk{fs: cfg.FS}
	if err := d.makeDir(dir); err != nil {
		return nil, RepairReport{}, err
	}
	opts := tidwallOptions(cfg, d)
	if err := d.finishTruncation(dir, opts, logger); err != nil {
		return nil, RepairReport{}, err
	}
	lay, rep, err := d.verifyAndRepair(dir, logger)
	if err != nil {
		return nil, RepairReport{}, err
	}
	tw, err := d.openTidwall(dir, opts, lay)
	if err != nil {
		return nil, RepairReport{}, err
	}
	l := newLog(cfg, d, dir, logger, tw, lay)
	logger.Info("opened log", slog.Uint64("first", l.first), slog.Uint64("last", l.last))
	return l, rep, nil
}

// tidwallOptions sets every tidwall option explicitly. AllowEmpty lets a log
// whose only segment was emptied by a tail repair open (FirstIndex is then
// LastIndex+1).
func tidwallOptions(cfg Config, d disk) tidwall.Options {
	return tidwall.Options{
		NoSync:           mutant.On(mutant.SkipWALSync), // false: WriteBatch ends with an fsync, the commit point (mutation test only)
		SegmentSize:      cfg.SegmentSize,
		LogFormat:        tidwall.Binary,
		SegmentCacheSize: 2,
		NoCopy:           false, // Read returns a copy we may alias
		AllowEmpty:       true,
		DirPerms:         0o750,
		FilePerms:        0o640,
		FS:               tidwallFS{d},
	}
}

// openTidwall opens the verified log, checks that tidwall sees the indexes
// the verification found, and fsyncs the directory (tidwall creates the first
// segment of a new log).
func (d disk) openTidwall(dir string, opts tidwall.Options, lay layout) (*tidwall.Log, error) {
	tw, err := tidwall.Open(dir, &opts)
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	first, errF := tw.FirstIndex()
	last, errL := tw.LastIndex()
	if err := errors.Join(errF, errL); err != nil {
		tw.Close()
		return nil, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	if lay.segments > 0 && (first != lay.first || last != lay.last) {
		tw.Close()
		return nil, fmt.Errorf("wal: open %s: tidwall sees indexes [%d, %d], verification found [%d, %d]: %w",
			dir, first, last, lay.first, lay.last, ErrCorrupt)
	}
	if err := d.syncDir(dir); err != nil {
		tw.Close()
		return nil, err
	}
	return tw, nil
}

func newLog(cfg Config, d disk, dir string, logger *slog.Logger, tw *tidwall.Log, lay layout) *Log {
	first, _ := tw.FirstIndex()
	last, _ := tw.LastIndex()
	l := &Log{
		cfg:       cfg,
		dir:       dir,
		disk:      d,
		logger:    logger,
		tw:        tw,
		next:      last + 1,
		first:     first,
		last:      last,
		stopped:   make(chan struct{}),
		tailBytes: lay.tailBytes,
	}
	l.cond = sync.NewCond(&l.mu)
	go l.run()
	return l
}

// FirstIndex returns the index of the first entry. An empty log has
// FirstIndex == LastIndex+1 (1 and 0 for a new log).
func (l *Log) FirstIndex() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

// LastIndex returns the index of the last durable entry (AppendAsync records
// count once they are written).
func (l *Log) LastIndex() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// Stats returns the counters since Open.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// bounds returns the durable index range, or the error every call gets on a
// failed or closed Log.
func (l *Log) bounds() (first, last uint64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first, l.last, l.usableLocked()
}

// usableLocked returns the fail-stop error, ErrClosed, or nil. l.mu is held.
func (l *Log) usableLocked() error {
	if l.failErr != nil {
		return l.failErr
	}
	if l.closing {
		return ErrClosed
	}
	return nil
}

// fail fail-stops the Log with cause (the first cause wins) and returns the
// error to report.
func (l *Log) fail(op string, cause error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failErr == nil {
		l.failErr = failedError(op, cause)
		l.logger.Error("log failed; stop using it and restart", slog.String("op", op), slog.Any("err", cause))
		l.cond.Broadcast()
	}
	return l.failErr
}

// Replay calls fn for every entry from FirstIndex to LastIndex in order,
// decoding and verifying each envelope. A bad envelope gives a *CorruptError;
// an error from fn stops the replay and is returned as is. Payloads are fresh
// copies that fn may keep. Do not run Replay concurrently with TruncateFront.
func (l *Log) Replay(fn func(index uint64, rec Record) error) error {
	first, last, err := l.bounds()
	if err != nil {
		return err
	}
	for i := first; i <= last; i++ {
		data, err := l.tw.Read(i)
		if err != nil {
			return l.readError(i, err)
		}
		rec, err := decodeRecord(data)
		if err != nil {
			return l.corruptAt(i, err.Error())
		}
		if err := fn(i, rec); err != nil {
			return err
		}
	}
	return nil
}

func (l *Log) readError(index uint64, err error) error {
	switch {
	case errors.Is(err, tidwall.ErrCorrupt):
		return l.corruptAt(index, "tidwall: "+err.Error())
	case errors.Is(err, tidwall.ErrClosed):
		return fmt.Errorf("wal: read index %d: %w", index, ErrClosed)
	default:
		return fmt.Errorf("wal: read index %d: %w", index, err)
	}
}

func (l *Log) corruptAt(index uint64, reason string) error {
	file, off := l.disk.locateEntry(l.dir, index)
	return &CorruptError{File: file, Offset: off, Index: index, Reason: reason}
}

// TruncateFront drops every entry before index, so that index becomes the
// first, then fsyncs the directory. index <= FirstIndex is a no-op; index >
// LastIndex is an error (the Log stays usable). A failure to write the copy of
// the segment that is to start the log returns ErrNotTruncated: nothing was
// changed, the Log stays usable. Any later failure fail-stops the Log. A crash
// before it returns may leave the log untruncated, never half-truncated.
func (l *Log) TruncateFront(index uint64) error {
	l.truncMu.Lock()
	defer l.truncMu.Unlock()
	first, last, err := l.bounds()
	if err != nil || index <= first {
		return err
	}
	if index > last {
		return fmt.Errorf("wal: truncate front to %d: beyond the last index %d", index, last)
	}
	if err := failpoint.Hit(failpoint.WALTruncateFront); err != nil {
		return l.fail("truncate front", err)
	}
	if err := l.tw.TruncateFront(index); err != nil {
		if startNotWritten(err) {
			return fmt.Errorf("%w: truncate front to %d: %w", ErrNotTruncated, index, err)
		}
		return l.fail("truncate front", err)
	}
	if err := l.disk.syncDir(l.dir); err != nil {
		return l.fail("truncate front", err)
	}
	l.mu.Lock()
	l.first = index
	l.mu.Unlock()
	l.logger.Debug("truncated front", slog.Uint64("first", index))
	return nil
}

// Close commits everything queued (AppendAsync records included), stops the
// committer and closes the files. On a failed Log it returns the fail-stop
// error and leaves the tidwall files to process exit, because tidwall's Close
// would fsync again. A second Close returns ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closing {
		err := l.usableLocked()
		l.mu.Unlock()
		return err
	}
	l.closing = true
	l.cond.Broadcast()
	l.mu.Unlock()
	<-l.stopped

	l.truncMu.Lock()
	defer l.truncMu.Unlock()
	l.mu.Lock()
	failErr := l.failErr
	l.mu.Unlock()
	if failErr != nil {
		return failErr
	}
	if err := l.tw.Close(); err != nil {
		return l.fail("close", err)
	}
	l.logger.Info("closed log")
	return nil
}

// startNotWritten reports a tidwall TruncateFront error from writing the .START
// copy (atomicWrite, in third_party/tidwall/wal/wal.go truncateFront) for
// want of space (ENOSPC, EDQUOT), which comes before any change to the segments
// or to tidwall's state: its temp file is removed, and the log is as it was. Any
// other error there (EIO, EMFILE, EROFS) is a fault of the log's filesystem and
// fail-stops the log like any other.
func startNotWritten(err error) bool {
	return strings.HasPrefix(err.Error(), "failed to create start segment: ") &&
		(errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT))
}
