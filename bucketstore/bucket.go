package bucketstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

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

	live      map[int64]int64 // offset -> length of each live extent
	pads      map[int64]int64 // offset of a write unit's last extent -> its padding to WriteAlignment
	shared    map[int64]int32 // filesystem block (offset / WriteAlignment) -> live footprints partly in it
	complete  bool            // live holds every extent referenced in the file: fresh, or collected
	liveBytes int64           // sum of live extents
	padBytes  int64           // sum of pads

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
		s.buckets[id] = &bucket{id: id, path: path, f: f, live: map[int64]int64{}, pads: map[int64]int64{}, shared: map[int64]int32{}}
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
	b := &bucket{id: id, path: path, f: f, fresh: true, complete: true, dirGen: s.dirGen, live: map[int64]int64{}, pads: map[int64]int64{}, shared: map[int64]int32{}}
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
	delete(s.buckets, b.id)
	b.removed.Store(true)
	s.dirGen++
	s.log.Debug("removing bucket", "bucket", b.id)
	return errors.Join(b.f.Close(), s.fs.Remove(b.path))
}

// addLiveLocked counts ext as live in b, with pad bytes of padding after it.
func (s *Store) addLiveLocked(b *bucket, ext Extent, pad int64) error {
	if _, dup := b.live[ext.Offset]; dup {
		return fmt.Errorf("bucketstore: extent %v already live", ext)
	}
	b.live[ext.Offset] = ext.Length
	b.liveBytes += ext.Length
	s.live += ext.Length
	if pad > 0 {
		b.pads[ext.Offset] = pad
		b.padBytes += pad
		s.pad += pad
	}
	for _, blk := range partialBlocks(ext.Offset, ext.End()+pad) {
		b.shared[blk]++
	}
	return nil
}

// dropLiveLocked stops counting the live extent at off (length bytes) in b and returns the
// range to punch: the extent and its pad, widened to the whole filesystem block at either
// end that no other live footprint touches any more, when b.complete (in a bucket whose live
// extents are still being adopted one by one, a neighbour not adopted yet is not counted).
func (s *Store) dropLiveLocked(b *bucket, off, length int64) (punchOff, punchEnd int64) {
	pad := b.pads[off]
	delete(b.live, off)
	delete(b.pads, off)
	b.liveBytes -= length
	s.live -= length
	b.padBytes -= pad
	s.pad -= pad
	punchOff, punchEnd = off, off+length+pad
	for _, blk := range partialBlocks(punchOff, punchEnd) {
		if b.shared[blk]--; b.shared[blk] > 0 {
			continue
		}
		delete(b.shared, blk)
		if !b.complete {
			continue
		}
		punchOff = min(punchOff, blk*WriteAlignment)
		punchEnd = max(punchEnd, (blk+1)*WriteAlignment)
	}
	return punchOff, punchEnd
}

// partialBlocks returns the filesystem blocks (offset / WriteAlignment) that [off, end)
// touches without covering them: at most the first and the last.
func partialBlocks(off, end int64) []int64 {
	var out []int64
	if off%WriteAlignment != 0 {
		out = append(out, off/WriteAlignment)
	}
	if last := (end - 1) / WriteAlignment; end%WriteAlignment != 0 && (len(out) == 0 || out[0] != last) {
		out = append(out, last)
	}
	return out
}

// reserveLocked lays the extents of sizes out from b's tail (a multiple of WriteAlignment),
// counts them live and moves the tail past them. Each write unit's padding to WriteAlignment
// is kept with its last extent (b.pads), counted against Capacity with the live bytes, and
// released when that extent is freed.
func (s *Store) reserveLocked(b *bucket, sizes []int64) ([]Extent, error) {
	offs, pads, total := layout(sizes)
	start := b.tail
	b.tail += total // first: an error below leaves a gap, never an overlap
	exts := make([]Extent, len(sizes))
	for i, size := range sizes {
		exts[i] = Extent{Bucket: b.id, Offset: start + offs[i], Length: size}
		if err := s.addLiveLocked(b, exts[i], pads[i]); err != nil {
			return nil, err // an accounting bug: the tail only grows
		}
	}
	s.preallocateLocked(b)
	return exts, nil
}

// layout places extents of sizes back to back in write units: a unit starts at a multiple of
// WriteAlignment and is padded to one, and a new unit starts before an extent that would take
// the current one past MaxRunBytes (so WriteRecords, which splits runs at the same places,
// writes each with one pwrite of at most MaxRunBytes, or one record longer than that). It
// returns each extent's offset from the start, the padding after it (non-zero only for the
// last extent of a unit) and the total, a multiple of WriteAlignment.
func layout(sizes []int64) (offs, pads []int64, total int64) {
	offs, pads = make([]int64, len(sizes)), make([]int64, len(sizes))
	var unit int64 // bytes in the current unit
	for i, size := range sizes {
		if unit > 0 && splitsBefore(unit, size) {
			pads[i-1] = alignUp(total, WriteAlignment) - total
			total += pads[i-1]
			unit = 0
		}
		offs[i] = total
		total += size
		unit += size
	}
	if n := len(sizes); n > 0 {
		pads[n-1] = alignUp(total, WriteAlignment) - total
		total += pads[n-1]
	}
	return offs, pads, total
}

// splitsBefore reports whether a write unit holding unit bytes ends before an extent of size
// bytes: the unit, padded, would exceed MaxRunBytes.
func splitsBefore(unit, size int64) bool {
	return alignUp(unit+size, WriteAlignment) > MaxRunBytes
}

// reservedSize is the bytes a reservation of sizes takes, padding included.
func reservedSize(sizes ...int64) int64 {
	_, _, total := layout(sizes)
	return total
}

func checkExtent(ext Extent) error {
	if ext.Offset < 0 || ext.Offset%Alignment != 0 || ext.Length <= 0 || ext.Length%Alignment != 0 {
		return fmt.Errorf("bucketstore: extent %+v is not aligned to %d", ext, Alignment)
	}
	return nil
}

// writeUnitLocked checks that ext may be written with one pwrite of [ext.Offset,
// alignUp(ext.End(), WriteAlignment)): it starts at a multiple of WriteAlignment and no other
// live extent starts in the padding after it, which the pwrite zeroes (an extent in the
// middle of a run written alone would zero its neighbour's first bytes).
func writeUnitLocked(b *bucket, ext Extent) error {
	if ext.Offset%WriteAlignment != 0 {
		return fmt.Errorf("bucketstore: write %+v: does not start at a multiple of %d", ext, WriteAlignment)
	}
	for off := ext.End(); off < alignUp(ext.End(), WriteAlignment); off += Alignment {
		if _, ok := b.live[off]; ok {
			return fmt.Errorf("bucketstore: write %+v: live extent at %d shares its last %d-byte block", ext, off, WriteAlignment)
		}
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
