package bucketstore

import (
	"sync"

	"github.com/kvoffload/kvoffload/vfs"
)

// RecordPrep names read i of a ReadBatch: the record's extent and the header it must match
// (as for Read). ok false skips read i (its done is not called).
type RecordPrep func(i int) (ext Extent, want Header, ok bool)

// RecordDone receives the outcome of read i of a ReadBatch, as Read gives it: the verified
// payload, or an error (wrapping ErrCorrupt for a bad record or extent). With pooled reads the
// payload lies in a recycled record buffer (the write path's pool: no allocation and no fresh
// pages per read, for a caller that copies it out) and release, not nil when err is nil,
// returns it; neither the payload nor any slice of it may be used afterwards. Without,
// release is nil and the payload is a fresh slice owned by the caller.
type RecordDone func(i int, payload []byte, release func(), err error)

// ReadBatch reads and verifies records 0..n-1 as Read does, with up to depth reads in flight
// on the device at once (vfs.ReadBatch: native AIO on the real filesystem, so a batch does not
// need a goroutine and a thread per read in flight). prep(i) is called just before read i is
// issued, so a pin or a buffer it takes is held only while that read is in flight; done(i)
// once per read prep named, as each is verified, in any order. Either may be called from
// several goroutines at once, never twice at once for the same i. A read refused before any
// I/O (see Read) is done at once with its error.
func (s *Store) ReadBatch(n, depth int, pooled bool, prep RecordPrep, done RecordDone) {
	type read struct {
		ext     Extent
		want    Header
		buf     []byte
		release func()
	}
	reads := make([]read, n)
	sizes := &fileSizes{}
	vfs.ReadBatch(s.fs, n, depth, func(i int) (vfs.File, []byte, int64, bool) {
		ext, want, ok := prep(i)
		if !ok {
			return nil, nil, 0, false
		}
		f, buf, release, err := s.planRead(ext, want, pooled, sizes)
		if err != nil {
			done(i, nil, nil, err)
			return nil, nil, 0, false
		}
		reads[i] = read{ext: ext, want: want, buf: buf, release: release}
		return f, buf, ext.Offset, true
	}, func(i, got int, err error) {
		r := reads[i]
		reads[i] = read{}
		payload, err := finishRead(r.ext, r.want, r.buf, got, err)
		switch {
		case err != nil:
			r.release()
			done(i, nil, nil, err)
		case pooled:
			done(i, payload, r.release, nil)
		default:
			done(i, payload, nil, nil)
		}
	})
}

// fileSizes remembers the file size of each bucket one ReadBatch reads, so that refusing an
// extent past the end of its file (before allocating for it) costs one fstat per bucket, not
// one per read. A size taken during the batch covers every record it reads: those were
// written and synced before their commit, which came before the batch's lookup. A file cut
// shorter meanwhile (Collect) only makes a read come up short, which is reported corrupt as
// without the cache.
type fileSizes struct {
	mu    sync.Mutex
	sizes map[*bucket]int64
}

// of returns b's file size, remembered after the first call for b; a nil fileSizes asks the
// file each time.
func (c *fileSizes) of(b *bucket) (int64, error) {
	if c == nil {
		return b.f.Size()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if size, ok := c.sizes[b]; ok {
		return size, nil
	}
	size, err := b.f.Size()
	if err != nil {
		return 0, err
	}
	if c.sizes == nil {
		c.sizes = map[*bucket]int64{}
	}
	c.sizes[b] = size
	return size, nil
}
