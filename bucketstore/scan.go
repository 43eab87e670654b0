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
// boundary that holds a verifiable header or an all-zero Alignment-byte sector. All-zero
// sectors (holes, unwritten space, padding) are skipped silently. Records of both format
// versions are found: each lies at a multiple of Alignment. If fn returns an error, Scan stops and returns it.
// Scan should run on a quiescent store: concurrent Free or Collect may make it report damage.
func (s *Store) Scan(fn func(ext Extent, h Header, err error) error) error {
	for _, id := range s.Buckets() {
		s.mu.Lock()
		b, err := s.bucketLocked(id)
		s.mu.Unlock()
		if errors.Is(err, ErrClosed) {
			return err
		}
		if err != nil {
			continue // removed since Buckets
		}
		if err := scanBucket(id, b.f, fn); err != nil {
			return err
		}
	}
	return nil
}

// scanner reads one bucket file: WriteAlignment bytes at a time (a header and key fit), at
// offsets that are multiples of Alignment.
type scanner struct {
	id    uint32
	f     vfs.File
	size  int64
	block []byte
	buf   []byte // record buffer, reused
}

func scanBucket(id uint32, f vfs.File, fn func(Extent, Header, error) error) error {
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("bucketstore: scan bucket %d: %w", id, err)
	}
	sc := &scanner{id: id, f: f, size: size, block: vfs.AlignedBuffer(WriteAlignment)}
	for off := int64(0); off < size; {
		next, err := sc.step(off, fn)
		if err != nil {
			return err
		}
		off = next
	}
	return nil
}

// step handles the sector at off and returns where the next step starts: past the leading
// all-zero sectors of the block read at off, or past the record or damage there.
func (sc *scanner) step(off int64, fn func(Extent, Header, error) error) (int64, error) {
	zeros, err := sc.readBlock(off)
	if err != nil {
		return 0, err
	}
	if zeros > 0 {
		return off + zeros, nil
	}
	h, herr := decodeHeader(sc.block)
	if herr == nil {
		ext := Extent{Bucket: sc.id, Offset: off, Length: sizeOf(h, sc.block[4])}
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

// resync returns the first multiple of Alignment at or after off where an all-zero sector or
// a verifiable header starts, or the end of the file.
func (sc *scanner) resync(off int64) (int64, error) {
	for ; off < sc.size; off += Alignment {
		zeros, err := sc.readBlock(off)
		if err != nil {
			return 0, err
		}
		if zeros > 0 {
			return off, nil
		}
		if _, err := decodeHeader(sc.block); err == nil {
			return off, nil
		}
	}
	return sc.size, nil
}

// readBlock reads WriteAlignment bytes at off into sc.block (zero-filled past the end of the
// file) and returns the length of its all-zero prefix in whole Alignment-byte sectors.
func (sc *scanner) readBlock(off int64) (int64, error) {
	n, err := sc.f.ReadAt(sc.block, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("bucketstore: scan bucket %d at %d: %w", sc.id, off, err)
	}
	clear(sc.block[n:])
	var zeros int64
	for zeros < int64(len(sc.block)) && allZero(sc.block[zeros:zeros+Alignment]) {
		zeros += Alignment
	}
	return zeros, nil
}
