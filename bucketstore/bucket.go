package bucketstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/kvoffload/kvoffload/internal/invariants"
	"github.com/kvoffload/kvoffload/vfs"
)

const (
	bucketPrefix = "bucket-"
	bucketSuffix = ".kvb"
	lockName     = "LOCK"
)

// bucket is one bucket file. Fields without a comment are guarded by Store.mu.
type bucket struct {
	id       uint32
	path     string
	f        vfs.File // immutable after creation
	fresh    bool     // created by this Store: the only kind that accepts writes
	tail     int64    // next free offset (fresh buckets)
	prealloc int64    // file allocated up to here (fresh buckets); -1: not supported
	dirGen   uint64   // Store.dirGen that covers its creation

	live      extentSet // the live extents
	liveBytes int64
	reached   int64 // with -tags invariants, in fresh buckets: the end of the last extent made live

	removed atomic.Bool
	failed  atomic.Bool   // a sync failed: never reserve in, sync, or trust it again
	writes  atomic.Uint64 // completed WriteRecords

	group  syncGroup
	synced uint64 // writes covered by the last fdatasync; guarded by group
}

func bucketName(id uint32) string { return fmt.Sprintf("%s%010d%s", bucketPrefix, id, bucketSuffix) }

// parseBucketName returns the ID of a bucket file name, or false.
func parseBucketName(name string) (uint32, bool) {
	digits, ok := strings.CutPrefix(name, bucketPrefix)
	if !ok {
		return 0, false
	}
	digits, ok = strings.CutSuffix(digits, bucketSuffix)
	if !ok || len(digits) != 10 {
		return 0, false
	}
	id, err := strconv.ParseUint(digits, 10, 32)
	return uint32(id), err == nil
}

// loadBuckets opens every existing bucket file; none of them accepts writes.
func (s *Store) loadBuckets() error {
	names, err := s.fs.ReadDir(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("bucketstore: list %s: %w", s.cfg.Dir, err)
	}
	for _, name := range names {
		id, ok := parseBucketName(name)
		if !ok {
			continue
		}
		path := filepath.Join(s.cfg.Dir, name)
		f, err := s.fs.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("bucketstore: open %s: %w", path, err)
		}
		s.buckets[id] = &bucket{id: id, path: path, f: f}
		s.nextID = max(s.nextID, id+1)
	}
	return nil
}

// rollLocked creates a new bucket file and makes it the open one. The previous open bucket
// is sealed and removed if nothing in it is live.
func (s *Store) rollLocked() error {
	if s.nextID == 0 {
		return errors.New("bucketstore: bucket IDs exhausted")
	}
	id := s.nextID
	s.nextID++
	path := filepath.Join(s.cfg.Dir, bucketName(id))
	f, err := s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("bucketstore: create %s: %w", path, err)
	}
	s.dirGen++
	b := &bucket{id: id, path: path, f: f, fresh: true, dirGen: s.dirGen}
	old := s.open
	s.buckets[id], s.open = b, b
	s.log.Debug("rolled bucket", "bucket", id)
	if old != nil && old.liveBytes == 0 {
		return s.removeLocked(old)
	}
	return nil
}

// removeLocked forgets b and removes its file. The removal becomes durable at the next
// directory sync; a removed bucket that reappears after a crash is orphan garbage for Collect.
func (s *Store) removeLocked(b *bucket) error {
	if invariants.Enabled && b.liveBytes != 0 {
		invariants.Failf("bucketstore: a bucket file is removed only when nothing in it is live",
			"bucket %d holds %d live bytes", b.id, b.liveBytes)
	}
	delete(s.buckets, b.id)
	b.removed.Store(true)
	s.dirGen++
	s.log.Debug("removing bucket", "bucket", b.id)
	return errors.Join(b.f.Close(), s.fs.Remove(b.path))
}

// addLiveLocked counts ext as live in b.
func (s *Store) addLiveLocked(b *bucket, ext Extent) error {
	if invariants.Enabled {
		b.checkOwnLocked(ext)
	}
	if !b.live.add(ext.Offset, ext.Length) {
		return fmt.Errorf("bucketstore: extent %v already live", ext)
	}
	b.liveBytes += ext.Length
	s.live += ext.Length
	if invariants.Enabled {
		s.checkCountsLocked(b)
	}
	return nil
}

// checkOwnLocked asserts that ext may become live in b: it is b's and aligned, and in a fresh
// bucket, where the store chose its offset, it starts at or past the end of the extent made
// live before it and ends at or before the tail: the extents of a fresh bucket are handed out
// in offset order, so no two of them overlap. (An adopted extent's offset comes from the
// metadata: an overlap there is the caller's to refuse.)
func (b *bucket) checkOwnLocked(ext Extent) {
	if err := checkExtent(ext); err != nil || ext.Bucket != b.id {
		invariants.Failf("bucketstore: a live extent is aligned and in its bucket", "%+v in bucket %d: %v", ext, b.id, err)
	}
	if !b.fresh {
		return
	}
	if ext.Offset < b.reached || ext.End() > b.tail {
		invariants.Failf("bucketstore: a fresh bucket's extents are handed out in offset order, below its tail",
			"%+v after an extent ending at %d, tail %d", ext, b.reached, b.tail)
	}
	b.reached = ext.End()
}

// checkCountsLocked asserts the byte counters after a change to b: none is negative, and the
// store's is at least b's (LiveBytes is the sum over the buckets: checkLocked).
func (s *Store) checkCountsLocked(b *bucket) {
	if b.liveBytes < 0 || s.live < b.liveBytes || s.pendingBytes < 0 {
		invariants.Failf("bucketstore: 0 <= a bucket's live bytes <= LiveBytes, pending bytes >= 0",
			"bucket %d: %d live bytes; store: %d live, %d pending", b.id, b.liveBytes, s.live, s.pendingBytes)
	}
}

// checkLocked asserts the accounting invariant of the package doc, by a recount: each
// bucket's live bytes are the sum of its live extents, and LiveBytes is the sum over the
// buckets. It walks every live extent: Close runs it, not every change.
func (s *Store) checkLocked() {
	var total int64
	for _, b := range s.buckets {
		var sum int64
		b.live.lengths(func(n int64) { sum += n })
		if sum != b.liveBytes {
			invariants.Failf("bucketstore: a bucket's live bytes are the sum of its live extents",
				"bucket %d: %d live bytes, extents sum to %d", b.id, b.liveBytes, sum)
		}
		total += sum
	}
	if total != s.live {
		invariants.Failf("bucketstore: LiveBytes is the sum of the live extents", "%d, extents sum to %d", s.live, total)
	}
}

func checkExtent(ext Extent) error {
	if ext.Offset < 0 || ext.Offset%Alignment != 0 || ext.Length <= 0 || ext.Length%Alignment != 0 {
		return fmt.Errorf("bucketstore: extent %+v is not aligned to %d", ext, Alignment)
	}
	return nil
}

// bucketLocked returns the bucket of ext.
func (s *Store) bucketLocked(id uint32) (*bucket, error) {
	if s.closed {
		return nil, ErrClosed
	}
	b := s.buckets[id]
	if b == nil {
		return nil, fmt.Errorf("bucketstore: no bucket %d", id)
	}
	return b, nil
}
