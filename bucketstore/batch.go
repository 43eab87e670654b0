package bucketstore

import (
	"errors"
	"fmt"

	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/invariants"
)

// ReserveRun reserves one extent per size, back to back in the open bucket, under one lock:
// a transaction's records then lie in one run that WriteRecords writes with one pwrite per
// MaxRunBytes, instead of one per record (the per-key syscall that bounded small objects,
// docs/benchmarks.md). It reserves all or nothing: when the run does not fit in what the open
// bucket has left, it rolls to a new bucket first; when it cannot be reserved at all (the
// quota, the filesystem's reserve, a size over BucketSize, more than a bucket in total), it
// reserves nothing and returns the error (as Reserve's), and the caller reserves record by
// record. Sizes must be positive multiples of
// Alignment.
func (s *Store) ReserveRun(sizes []int64) ([]Extent, error) {
	var total int64
	for _, size := range sizes {
		if size <= 0 || size%Alignment != 0 {
			return nil, fmt.Errorf("bucketstore: reserve %d: not a positive multiple of %d", size, Alignment)
		}
		total += size
	}
	if total > s.cfg.BucketSize {
		return nil, fmt.Errorf("%w: a run of %d bytes > BucketSize %d", ErrTooLarge, total, s.cfg.BucketSize)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if c := s.cfg.Capacity; c > 0 && s.live+total > c {
		return nil, fmt.Errorf("%w: live %d + %d > capacity %d", ErrNoSpace, s.live, total, c)
	}
	if err := s.checkSpaceLocked(total); err != nil {
		return nil, err
	}
	if s.open == nil || s.open.failed.Load() || s.open.tail+total > s.cfg.BucketSize {
		if err := s.rollLocked(); err != nil {
			return nil, err
		}
	}
	b := s.open
	exts := make([]Extent, len(sizes))
	for i, size := range sizes {
		exts[i] = Extent{Bucket: b.id, Offset: b.tail, Length: size}
		b.tail += size
		s.pendLocked(exts[i])
		if err := s.addLiveLocked(b, exts[i]); err != nil {
			return nil, err // an accounting bug: the tail only grows
		}
	}
	if invariants.Enabled {
		s.checkCapacityLocked()
	}
	s.preallocateLocked(b)
	return exts, nil
}

// MaxRunBytes bounds one pwrite of WriteRecords (and the aligned buffer it is encoded in):
// large enough that the device sees large sequential writes, small enough that 64 writers
// hold little memory.
const MaxRunBytes = 8 << 20

// runBufferStep is the granularity of run buffers: a run's buffer is its size rounded up to
// it, so that the buffer pools see at most MaxRunBytes/runBufferStep sizes.
const runBufferStep = 1 << 20

func roundUp(n, step int64) int64 { return (n + step - 1) / step * step }

// RecordWrite is one record for WriteRecords: its reserved extent, header and payload.
type RecordWrite struct {
	Ext     Extent
	Header  Header
	Payload []byte
}

// WriteRecords writes recs like WriteRecord, but records whose extents follow each other in
// one bucket are encoded into one aligned buffer and written with one pwrite per run of at
// most MaxRunBytes (a record larger than that is a run of its own). It returns one error per
// record (nil: written, not yet synced: durable only after Sync of its bucket returns nil).
// A run whose pwrite fails for want of space (ENOSPC, EDQUOT) is written again record by
// record, so only the records that do not fit fail, each as WriteRecord fails; any other
// failed pwrite fails every record of its run. Other runs go on either way. recs should be
// in extent order (ReserveRun gives them so); runs form only between neighbours.
func (s *Store) WriteRecords(recs []RecordWrite) []error {
	errs := make([]error, len(recs))
	for start := 0; start < len(recs); {
		end, size := start+1, recs[start].Ext.Length
		for end < len(recs) {
			prev, next := recs[end-1].Ext, recs[end].Ext
			if next.Bucket != prev.Bucket || next.Offset != prev.End() || size+next.Length > MaxRunBytes {
				break
			}
			size += next.Length
			end++
		}
		s.writeRun(recs[start:end], errs[start:end])
		start = end
	}
	return errs
}

// writeRun writes recs, consecutive extents of one bucket, with one pwrite (one per record
// when that runs out of space); errs[i] is set for every record that was not written.
func (s *Store) writeRun(recs []RecordWrite, errs []error) {
	if len(recs) == 1 {
		errs[0] = s.WriteRecord(recs[0].Ext, recs[0].Header, recs[0].Payload)
		return
	}
	fail := func(err error) {
		for i := range errs {
			errs[i] = err
		}
	}
	b, err := s.writableRun(recs)
	if err != nil {
		fail(err)
		return
	}
	first := recs[0].Ext
	size := recs[len(recs)-1].Ext.End() - first.Offset
	full := getBuffer(int(roundUp(size, runBufferStep))) // a few sizes, so the pools are reused
	defer putBuffer(full)
	buf := full[:size]
	for i, r := range recs {
		off := r.Ext.Offset - first.Offset
		if n := RecordSize(len(r.Header.Key), len(r.Payload)); n != r.Ext.Length {
			errs[i] = fmt.Errorf("bucketstore: record needs %d bytes, extent %+v has %d", n, r.Ext, r.Ext.Length)
		} else {
			errs[i] = EncodeRecord(buf[off:off+r.Ext.Length], r.Header, r.Payload)
		}
		if errs[i] != nil {
			clear(buf[off : off+r.Ext.Length]) // an unencodable record is written as zeros: it reads as no record
		}
	}
	if errors.Is(failpoint.Hit(failpoint.BucketWrite), failpoint.ErrTorn) {
		// Chaos builds only: leave the first half of the run (whole 4 KiB blocks, so
		// O_DIRECT accepts it) and die, as a power cut in the middle of the write would.
		_, _ = b.f.WriteAt(buf[:len(buf)/2/Alignment*Alignment], first.Offset)
		failpoint.Crash()
	}
	_, err = b.f.WriteAt(buf, first.Offset)
	defer func() {
		exts := make([]Extent, len(recs))
		for i, r := range recs {
			exts[i] = r.Ext
		}
		s.settle(exts...)
	}()
	switch {
	case err == nil:
		b.writes.Add(1)
	case noSpace(err):
		// What fits depends on each record's size, and a short write may have stopped
		// anywhere: every record is written again from the same bytes on its own, and only
		// a successful write is counted for Sync.
		for i, r := range recs {
			if errs[i] == nil {
				off := r.Ext.Offset - first.Offset
				errs[i] = s.writeEncoded(b, r.Ext, buf[off:off+r.Ext.Length])
			}
		}
	default:
		fail(fmt.Errorf("bucketstore: write %d records at %+v: %w", len(recs), first, err))
	}
}

// writableRun checks, under one lock, that every extent of recs is live and reserved in one
// fresh bucket, and returns the bucket.
func (s *Store) writableRun(recs []RecordWrite) (*bucket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucketLocked(recs[0].Ext.Bucket)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if !b.fresh || r.Ext.Bucket != b.id || b.live.length(r.Ext.Offset) != r.Ext.Length {
			return nil, fmt.Errorf("bucketstore: write %+v: not a live extent reserved by this store", r.Ext)
		}
	}
	return b, nil
}
