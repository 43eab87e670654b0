package bucketstore

import (
	"errors"
	"fmt"
	"io"

	"github.com/kvoffload/kvoffload/vfs"
)

// Scan walks every record of every bucket file in bucket and offset order, for checkers and
// tools. For a valid record fn gets its extent and header. For a damaged region it gets the
// region's extent and a non-nil error: when the record's header verified but the rest did
// not, the extent is the one the header describes; otherwise it runs to the next Alignment
// boundary that holds a verifiable header or an all-zero block. All-zero blocks (holes and
// unwritten space) are skipped silently. If fn returns an error, Scan stops and returns it.
// Scan should run on a quiescent store: concurrent Free or Collect may make it report damage.
// A bucket this store is writing is scanned up to its tail, not through the zeros allocated
// ahead of it.
func (s *Store) Scan(fn func(ext Extent, h Header, err error) error) error {
	for _, id := range s.Buckets() {
		s.mu.Lock()
		b, err := s.bucketLocked(id)
		end := int64(-1) // a bucket this store writes holds nothing past its tail (preallocated zeros)
		if err == nil && b.fresh {
			end = b.tail
		}
		s.mu.Unlock()
		if errors.Is(err, ErrClosed) {
			return err
		}
		if err != nil {
			continue // removed since Buckets
		}
		if err := scanBucket(id, b.f, end, fn); err != nil {
			return err
		}
	}
	return nil
}

// scanner reads one bucket file block by block.
type scanner struct {
	id    uint32
	f     vfs.File
	size  int64
	block []byte
	buf   []byte // record buffer, reused
}

// scanBucket scans f up to its size, or up to end when end >= 0 and smaller.
func scanBucket(id uint32, f vfs.File, end int64, fn func(Extent, Header, error) error) error {
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("bucketstore: scan bucket %d: %w", id, err)
	}
	if end >= 0 {
		size = min(size, end)
	}
	sc := &scanner{id: id, f: f, size: size, block: vfs.AlignedBuffer(Alignment)}
	for off := int64(0); off < size; {
		next, err := sc.step(off, fn)
		if err != nil {
			return err
		}
		off = next
	}
	return nil
}

// step handles the block at off and returns where the next step starts.
func (sc *scanner) step(off int64, fn func(Extent, Header, error) error) (int64, error) {
	zero, err := sc.readBlock(off)
	if err != nil {
		return 0, err
	}
	if zero {
		return off + Alignment, nil
	}
	h, herr := decodeHeader(sc.block)
	if herr == nil {
		ext := Extent{Bucket: sc.id, Offset: off, Length: RecordSize(len(h.Key), int(h.PayloadLen))}
		if int64(cap(sc.buf)) < ext.Length {
			sc.buf = vfs.AlignedBuffer(int(ext.Length))
		}
		_, _, rerr := readRecord(sc.f, ext, sc.buf)
		if rerr == nil {
			return ext.End(), fn(ext, h, nil)
		}
		return ext.End(), fn(ext, Header{}, rerr)
	}
	end, err := sc.resync(off + Alignment)
	if err != nil {
		return 0, err
	}
	return end, fn(Extent{Bucket: sc.id, Offset: off, Length: end - off}, Header{}, fmt.Errorf("scan bucket %d: %w", sc.id, herr))
}

// resync returns the first block boundary at or after off that is all zero, holds a
// verifiable header, or is the end of the file.
func (sc *scanner) resync(off int64) (int64, error) {
	for ; off < sc.size; off += Alignment {
		zero, err := sc.readBlock(off)
		if err != nil {
			return 0, err
		}
		if zero {
			return off, nil
		}
		if _, err := decodeHeader(sc.block); err == nil {
			return off, nil
		}
	}
	return sc.size, nil
}

// readBlock reads the block at off into sc.block (zero-filled past the end of the file) and
// reports whether it is all zero.
func (sc *scanner) readBlock(off int64) (bool, error) {
	n, err := sc.f.ReadAt(sc.block, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("bucketstore: scan bucket %d at %d: %w", sc.id, off, err)
	}
	clear(sc.block[n:])
	return allZero(sc.block), nil
}
