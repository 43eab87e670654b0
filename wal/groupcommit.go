package wal

import (
	"log/slog"

	"github.com/kvoffload/kvoffload/internal/failpoint"
	tidwall "github.com/kvoffload/kvoffload/third_party/tidwall/wal"
)

// request is one call waiting for the committer.
type request struct {
	entries [][]byte   // encoded envelopes; empty for Sync
	first   uint64     // index of entries[0] (or of the next record, for Sync)
	done    chan error // nil for AppendAsync; buffered, receives one result
}

// Append durably appends recs (consecutive indexes) and returns the index of
// the first. Concurrent callers are group-committed: one committer goroutine
// drains every waiting Append/AppendAsync into one tidwall WriteBatch (one
// fsync), fsyncs the directory when a new segment may have been created, and
// then wakes the waiters. Append blocks until its records are durable.
// Append with no records returns 0 and nil at once.
func (l *Log) Append(recs ...Record) (first uint64, err error) {
	if len(recs) == 0 {
		return 0, nil
	}
	entries, err := encodeAll(recs)
	if err != nil {
		return 0, err
	}
	r := &request{entries: entries, done: make(chan error, 1)}
	if err := l.enqueue(r); err != nil {
		return 0, err
	}
	if err := <-r.done; err != nil {
		return 0, err
	}
	return r.first, nil
}

// AppendAsync queues recs for the next group commit and returns at once. The
// records become durable with the next Append, Sync or Close, or when
// MaxBatchRecords records are queued. It never blocks on I/O. An invalid
// record is logged and dropped; a write failure shows up as ErrFailed on later
// calls.
func (l *Log) AppendAsync(recs ...Record) {
	if len(recs) == 0 {
		return
	}
	entries, err := encodeAll(recs)
	if err != nil {
		l.logger.Error("AppendAsync dropped invalid records", slog.Any("err", err))
		return
	}
	_ = l.enqueue(&request{entries: entries}) // a failure is reported by later calls
}

// Sync waits until everything queued before the call is durable.
func (l *Log) Sync() error {
	r := &request{done: make(chan error, 1)}
	if err := l.enqueue(r); err != nil {
		return err
	}
	return <-r.done
}

func encodeAll(recs []Record) ([][]byte, error) {
	entries := make([][]byte, len(recs))
	for i, rec := range recs {
		b, err := encodeRecord(rec)
		if err != nil {
			return nil, err
		}
		entries[i] = b
	}
	return entries, nil
}

// enqueue assigns r its indexes and queues it for the committer.
func (l *Log) enqueue(r *request) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usableLocked(); err != nil {
		return err
	}
	r.first = l.next
	l.next += uint64(len(r.entries))
	l.queue = append(l.queue, r)
	l.queuedRecs += len(r.entries)
	if r.done != nil {
		l.waiters++
	}
	if l.flushableLocked() {
		l.cond.Signal()
	}
	return nil
}

// flushableLocked reports whether the committer has work: someone waits, too
// many records are queued, or the Log is closing or failed. l.mu is held.
func (l *Log) flushableLocked() bool {
	return len(l.queue) > 0 && (l.waiters > 0 || l.queuedRecs >= l.cfg.MaxBatchRecords ||
		l.closing || l.failErr != nil)
}

// run is the committer goroutine.
func (l *Log) run() {
	defer close(l.stopped)
	for {
		reqs, ok := l.take()
		if !ok {
			return
		}
		wrote, err := l.writeGroup(reqs)
		l.complete(reqs, wrote, err)
	}
}

// take waits for work and removes the next group of requests from the queue:
// at least one request, and more while the group stays within
// MaxBatchRecords records. It returns false when the Log is closing and the
// queue is empty.
func (l *Log) take() ([]*request, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for !l.flushableLocked() {
		if l.closing && len(l.queue) == 0 {
			return nil, false
		}
		l.cond.Wait()
	}
	n, recs := 0, 0
	for ; n < len(l.queue); n++ {
		k := len(l.queue[n].entries)
		if n > 0 && recs+k > l.cfg.MaxBatchRecords {
			break
		}
		recs += k
		if l.queue[n].done != nil {
			l.waiters--
		}
	}
	reqs := make([]*request, n)
	copy(reqs, l.queue)
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:]) // drop references to the taken requests
	l.queue = l.queue[:rest]
	l.queuedRecs -= recs
	return reqs, true
}

// writeGroup writes reqs as one tidwall batch (one fsync), then fsyncs the
// directory if the batch may have started a new segment. wrote reports
// whether a batch was written (false for a group of Sync calls only).
func (l *Log) writeGroup(reqs []*request) (wrote bool, err error) {
	l.mu.Lock()
	failErr := l.failErr
	l.mu.Unlock()
	if failErr != nil {
		return false, failErr
	}
	var b tidwall.Batch
	index, size := reqs[0].first, 0
	for _, r := range reqs {
		for _, e := range r.entries {
			b.Write(index, e)
			index++
			size += uvarintLen(len(e)) + len(e)
		}
	}
	if index == reqs[0].first {
		return false, nil // only Sync calls: everything before them is durable
	}
	if err := failpoint.Hit(failpoint.WALWriteBatch); err != nil {
		return false, l.fail("write batch", err)
	}
	if err := l.tw.WriteBatch(&b); err != nil {
		return false, l.fail("write batch", err)
	}
	if err := l.afterWrite(size); err != nil {
		return false, l.fail("write batch", err)
	}
	l.mu.Lock()
	l.last = index - 1
	l.mu.Unlock()
	return true, nil
}

// afterWrite fsyncs the directory if the batch of size bytes may have made
// tidwall create a segment, whose directory entry tidwall never fsyncs.
// tidwall rotates exactly when the tail reaches SegmentSize, so the estimate
// is exact while tailBytes is; it is refreshed from disk after a rotation.
func (l *Log) afterWrite(size int) error {
	l.tailBytes += size
	if l.tailBytes < l.cfg.SegmentSize {
		return nil
	}
	if err := l.disk.syncDir(l.dir); err != nil {
		return err
	}
	l.tailBytes = l.tailSize()
	return nil
}

// tailSize returns the size of the last segment file, or SegmentSize (forcing
// a directory fsync after the next batch) if it cannot tell.
func (l *Log) tailSize() int {
	l.truncMu.Lock() // no TruncateFront is renaming segments meanwhile
	defer l.truncMu.Unlock()
	segs, _, err := l.disk.listSegments(l.dir)
	if err != nil || len(segs) == 0 {
		return l.cfg.SegmentSize
	}
	size, err := l.disk.size(segs[len(segs)-1].path)
	if err != nil {
		return l.cfg.SegmentSize
	}
	return int(size)
}

// complete records the result of a commit and wakes the waiters.
func (l *Log) complete(reqs []*request, wrote bool, err error) {
	if wrote {
		l.mu.Lock()
		l.stats.Batches++
		for _, r := range reqs {
			if len(r.entries) > 0 {
				l.stats.Appends++
				l.stats.Records += uint64(len(r.entries))
			}
		}
		l.mu.Unlock()
	}
	for _, r := range reqs {
		if r.done != nil {
			r.done <- err
		}
	}
}

func uvarintLen(n int) int {
	size := 1
	for ; n >= 0x80; n >>= 7 {
		size++
	}
	return size
}
