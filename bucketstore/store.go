package bucketstore

import (
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/invariants"
	"github.com/kvoffload/kvoffload/vfs"

	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
)

// Store appends records to bucket files. See the package documentation for the contract.
type Store struct {
	cfg  Config
	fs   vfs.FS
	log  *slog.Logger
	lock io.Closer

	mu        sync.Mutex
	buckets   map[uint32]*bucket
	open      *bucket // bucket receiving reserves; nil until the first Reserve
	nextID    uint32
	live      int64  // sum of live extents over all buckets
	dirGen    uint64 // bumped by every bucket file creation and removal
	dirSynced uint64 // dirGen covered by the last successful directory sync
	closed    bool

	// reserve is Config.Reserve, or what SetReserve set since. space reports the free space of
	// Dir's filesystem (nil: the FS cannot tell, and nothing is checked). pending holds the extents reserved and not yet written or freed, and
	// pendingBytes their sum: bytes that will take free space the filesystem still reports.
	reserve      atomic.Int64
	space        vfs.SpaceReporter
	pending      map[Extent]struct{}
	pendingBytes int64

	dirGroup syncGroup
	syncs    atomic.Uint64 // fdatasyncs issued
}

// Open opens (creating if needed) the store in cfg.Dir and locks it. Existing bucket files
// are only read, freed, adopted and collected: new records always go to a fresh bucket file
// whose ID is greater than every existing one.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := cfg.FS.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("bucketstore: mkdir %s: %w", cfg.Dir, err)
	}
	lock, err := cfg.FS.Lock(filepath.Join(cfg.Dir, lockName))
	if errors.Is(err, vfs.ErrLocked) {
		return nil, fmt.Errorf("%w: %w", ErrLocked, err)
	}
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, fs: cfg.FS, log: cfg.Logger, lock: lock, buckets: map[uint32]*bucket{}, nextID: 1}
	s.reserve.Store(cfg.Reserve)
	if sr, ok := cfg.FS.(vfs.SpaceReporter); ok {
		s.space, s.pending = sr, map[Extent]struct{}{}
	}
	if err := s.loadBuckets(); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	s.log.Info("opened", "dir", cfg.Dir, "buckets", len(s.buckets), "next", s.nextID)
	return s, nil
}

// Reserve allocates size bytes (a RecordSize) in the open bucket, rolling to a new bucket
// file when it is full or failed. The extent counts as live until freed. Errors: ErrNoSpace
// over Config.Capacity; a *DiskFullError (ErrDiskFull) when the filesystem would keep less
// than Config.Reserve free; ErrTooLarge over BucketSize; ErrClosed.
func (s *Store) Reserve(size int64) (Extent, error) {
	if size <= 0 || size%Alignment != 0 {
		return Extent{}, fmt.Errorf("bucketstore: reserve %d: not a positive multiple of %d", size, Alignment)
	}
	if size > s.cfg.BucketSize {
		return Extent{}, fmt.Errorf("%w: %d > %d", ErrTooLarge, size, s.cfg.BucketSize)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Extent{}, ErrClosed
	}
	if c := s.cfg.Capacity; c > 0 && s.live+size > c {
		return Extent{}, fmt.Errorf("%w: live %d + %d > capacity %d", ErrNoSpace, s.live, size, c)
	}
	if err := s.checkSpaceLocked(size); err != nil {
		return Extent{}, err
	}
	if s.open == nil || s.open.failed.Load() || s.open.tail+size > s.cfg.BucketSize {
		if err := s.rollLocked(); err != nil {
			return Extent{}, err
		}
	}
	b := s.open
	ext := Extent{Bucket: b.id, Offset: b.tail, Length: size}
	b.tail += size
	s.pendLocked(ext)
	s.preallocateLocked(b)
	err := s.addLiveLocked(b, ext)
	if invariants.Enabled {
		s.checkCapacityLocked()
	}
	return ext, err
}

// checkCapacityLocked asserts, after a reservation, what Reserve checked before it: Capacity
// bounds LiveBytes. (Adopt and Collect may take LiveBytes over a Capacity lowered since the
// bytes were written; a reservation never does.)
func (s *Store) checkCapacityLocked() {
	if c := s.cfg.Capacity; c > 0 && s.live > c {
		invariants.Failf("bucketstore: Capacity bounds LiveBytes at Reserve", "live %d > capacity %d", s.live, c)
	}
}

// checkSpaceLocked refuses a reservation of size bytes that would leave less than
// Config.Reserve free on Dir's filesystem (a *DiskFullError). The free space counts out the
// bytes reserved and not yet written, and counts in what the open bucket has allocated past
// its tail when the reservation lands there (writes there take no more). Reserved bytes that
// land inside an allocation are counted out too, so the check errs on the side of the reserve.
// A filesystem whose free space cannot be read is not checked (the error is logged).
func (s *Store) checkSpaceLocked(size int64) error {
	reserve := s.reserve.Load()
	if s.space == nil || reserve == 0 {
		return nil
	}
	free, err := s.space.FreeSpace(s.cfg.Dir)
	if err != nil {
		s.log.Warn("free space unknown: the reserve is not checked", "dir", s.cfg.Dir, "err", err)
		return nil
	}
	avail := free - s.pendingBytes
	if b := s.open; b != nil && !b.failed.Load() && b.tail+size <= s.cfg.BucketSize && b.prealloc > b.tail {
		avail += b.prealloc - b.tail
	}
	if avail-size < reserve {
		return &DiskFullError{Size: size, Free: avail, Reserve: reserve}
	}
	return nil
}

// SetReserve replaces Config.Reserve (bytes, not negative) for the reservations that follow:
// the room the WAL and the Raft log need grows with the metadata (its snapshots).
func (s *Store) SetReserve(bytes int64) { s.reserve.Store(max(bytes, 0)) }

// pendLocked records ext as reserved and not yet written (see checkSpaceLocked).
func (s *Store) pendLocked(ext Extent) {
	if s.pending != nil {
		s.pending[ext] = struct{}{}
		s.pendingBytes += ext.Length
	}
}

// settleLocked records that ext no longer waits to be written: written, failed, or freed.
func (s *Store) settleLocked(ext Extent) {
	if _, ok := s.pending[ext]; ok {
		delete(s.pending, ext)
		s.pendingBytes -= ext.Length
	}
	if invariants.Enabled && (s.pendingBytes < 0 || len(s.pending) == 0 && s.pendingBytes != 0) {
		invariants.Failf("bucketstore: pending bytes are the sum of the extents reserved and not yet written",
			"%d bytes over %d extents", s.pendingBytes, len(s.pending))
	}
}

// settle is settleLocked for each extent, under s.mu.
func (s *Store) settle(exts ...Extent) {
	if s.pending == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ext := range exts {
		s.settleLocked(ext)
	}
}

// preallocFirst is how much of a fresh bucket file is allocated at its first reservation;
// each later allocation doubles what is allocated (up to BucketSize), while it is at most half
// of the filesystem's free space.
const preallocFirst = 64 << 20

// preallocateLocked allocates the open bucket's file ahead of its tail (fallocate, mode 0),
// so record writes land inside the file instead of extending it: ext4 serializes O_DIRECT
// writes that extend a file under the inode lock, and allocated-ahead writes run in
// parallel (measured here: ~1.6x for 32 concurrent 256 KiB writers). When the tail passes
// the allocated end, the allocation doubles (64 MiB, 128, 256, ...: 5 fallocates for a
// default 1 GiB bucket), because on ext4 a fallocate waits for every O_DIRECT write in flight
// on the file (inode_dio_wait) and holds new ones, and it runs under s.mu: the earlier fixed
// steps of 64 MiB stalled every writer 16 times per GiB (docs/benchmarks.md), while
// allocating a whole bucket at once held up to 1 GiB of disk that a small store never used. The unused allocation is at most what the bucket holds (and
// preallocFirst). The allocated tail reads as zeros, which Scan skips and Collect truncates.
// Best effort: an error or an FS without the capability just leaves writes extending the
// file.
func (s *Store) preallocateLocked(b *bucket) {
	if b.prealloc < 0 || b.tail <= b.prealloc {
		return
	}
	if s.cfg.Capacity > 0 {
		b.prealloc = -1 // allocated-ahead bytes would count against a quota measured on disk
		return
	}
	a, ok := b.f.(vfs.Allocator)
	if !ok {
		b.prealloc = -1
		return
	}
	end := min(max(b.tail, 2*b.prealloc, preallocFirst), s.cfg.BucketSize)
	// Allocating ahead must not take the room the WAL and the Raft log need on a nearly full
	// disk (one allocation can fill a 600 MB disk, and the next WAL append then fail-stops the
	// node): at most half of what is free, and never into Config.Reserve (nor into the bytes
	// reserved and not yet written), else not at all. TestNoPreallocationOnANearlyFullDisk and
	// TestPreallocationLeavesTheReserve guard it.
	if free, err := a.FreeBytes(); err != nil || end-b.prealloc > min(free/2, free-s.reserve.Load()-s.pendingBytes) {
		s.log.Info("not preallocating: the free space is unknown or short; writes will extend the file",
			"bucket", b.id, "want", end-b.prealloc, "free", free, "err", err)
		b.prealloc = -1
		return
	}
	if err := a.Allocate(b.prealloc, end-b.prealloc); err != nil {
		// A failed fallocate may keep the blocks it got (ext4 does on ENOSPC), which would
		// leave the disk full for the WAL and the Raft log: cut the file back to where the last
		// allocation ended. Nothing past it is written yet: the reservation past it is this
		// call's, under s.mu.
		terr := b.f.Truncate(b.prealloc)
		s.log.Warn("preallocation failed; writes will extend the file", "bucket", b.id, "err", err, "cut_back_err", terr)
		b.prealloc = -1
		return
	}
	b.prealloc = end
}

// WriteRecord encodes the record into an aligned buffer and writes it at ext, which must
// come from Reserve in this Store. Writers of different extents may run concurrently.
// The record is durable only after Sync of its bucket returns nil. A write that fails for
// want of space (the error wraps syscall.ENOSPC or EDQUOT) gives back the blocks it may have
// taken: ext is punched, so they stay free for other records and for the WAL.
func (s *Store) WriteRecord(ext Extent, h Header, payload []byte) error {
	defer s.settle(ext)
	b, err := s.writableBucket(ext)
	if err != nil {
		return err
	}
	if n := RecordSize(len(h.Key), len(payload)); n != ext.Length {
		return fmt.Errorf("bucketstore: record needs %d bytes, extent %+v has %d", n, ext, ext.Length)
	}
	buf := getBuffer(int(ext.Length))
	defer putBuffer(buf)
	if err := EncodeRecord(buf, h, payload); err != nil {
		return err
	}
	if errors.Is(failpoint.Hit(failpoint.BucketWrite), failpoint.ErrTorn) {
		// Chaos builds only: leave the first half of the record (whole 4 KiB blocks, so
		// O_DIRECT accepts it) and die, as a power cut in the middle of the write would.
		_, _ = b.f.WriteAt(buf[:len(buf)/2/Alignment*Alignment], ext.Offset)
		failpoint.Crash()
	}
	return s.writeEncoded(b, ext, buf)
}

// writeEncoded writes buf, an encoded record, at ext of b and counts the write, so that the
// next Sync of b runs an fdatasync that covers it. A write that fails for want of space may
// have taken blocks for part of buf (a short write keeps them): ext is punched to give them
// back, which is safe because nothing references a record whose write failed.
func (s *Store) writeEncoded(b *bucket, ext Extent, buf []byte) error {
	if _, err := b.f.WriteAt(buf, ext.Offset); err != nil {
		if noSpace(err) {
			if perr := b.f.PunchHole(ext.Offset, ext.Length); perr != nil {
				s.log.Warn("could not give back the blocks of a write that ran out of space", "extent", ext, "err", perr)
			}
		}
		return fmt.Errorf("bucketstore: write %+v: %w", ext, err)
	}
	b.writes.Add(1)
	return nil
}

// noSpace reports whether err says the filesystem (or the user's quota) is out of space: such
// a write depends on its size, so a smaller one may still succeed.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func (s *Store) writableBucket(ext Extent) (*bucket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucketLocked(ext.Bucket)
	if err != nil {
		return nil, err
	}
	if !b.fresh || b.live.length(ext.Offset) != ext.Length {
		return nil, fmt.Errorf("bucketstore: write %+v: not a live extent reserved by this store", ext)
	}
	return b, nil
}

// Read reads the record at ext and verifies it against want: key, TxnID, Generation,
// PayloadLen and PayloadSum, besides the record's own checksums. Any mismatch, a short file,
// a missing bucket, or an extent no record can have (not aligned to Alignment, longer than
// MaxRecordLen or than the record want describes, past the end of the file) yields an error
// wrapping ErrCorrupt: the extent comes from metadata, so a bad one is corrupt metadata, and
// it is refused before a buffer of its length is allocated. I/O errors are returned wrapped
// as they are. The payload is a fresh slice owned by the caller.
func (s *Store) Read(ext Extent, want Header) ([]byte, error) {
	f, buf, _, err := s.planRead(ext, want, false, nil)
	if err != nil {
		return nil, err
	}
	n, err := f.ReadAt(buf, ext.Offset)
	return finishRead(ext, want, buf, n, err)
}

// planRead checks a read of the record at ext against want before any I/O (see Read) and
// returns the bucket's file and a buffer of ext.Length bytes to read it into: recycled when
// pooled (release returns it), else fresh (release does nothing). sizes, when not nil, gives
// the bucket's file size instead of an fstat per read.
func (s *Store) planRead(ext Extent, want Header, pooled bool, sizes *fileSizes) (vfs.File, []byte, func(), error) {
	if err := checkExtent(ext); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if ext.Length > MaxRecordLen {
		return nil, nil, nil, corruptf("read %+v: length exceeds the largest record, %d bytes", ext, int64(MaxRecordLen))
	}
	if n := RecordSize(len(want.Key), int(want.PayloadLen)); ext.Length != n {
		return nil, nil, nil, corruptf("read %+v: a record of a %d-byte key and a %d-byte payload is %d bytes", ext, len(want.Key), want.PayloadLen, n)
	}
	s.mu.Lock()
	b, err := s.bucketLocked(ext.Bucket)
	s.mu.Unlock()
	if errors.Is(err, ErrClosed) {
		return nil, nil, nil, err
	}
	if err != nil {
		return nil, nil, nil, corruptf("read %+v: bucket missing", ext)
	}
	if size, err := sizes.of(b); err == nil && ext.End() > size {
		return nil, nil, nil, corruptf("read %+v: past the end of the file (%d bytes)", ext, size)
	}
	if !pooled {
		return b.f, vfs.AlignedBuffer(int(ext.Length)), func() {}, nil
	}
	buf := getBuffer(int(ext.Length))
	return b.f, buf, func() { putBuffer(buf) }, nil
}

// finishRead decodes and verifies the record read into buf (n bytes, err from the read) and
// returns its payload, a slice of buf.
func finishRead(ext Extent, want Header, buf []byte, n int, err error) ([]byte, error) {
	h, payload, err := decodeRead(ext, buf, n, err)
	if err != nil {
		return nil, err
	}
	if err := matchHeader(h, want); err != nil {
		return nil, fmt.Errorf("read %+v: %w", ext, err)
	}
	return payload, nil
}

// readRecord reads and decodes the record at ext, reusing buf if it is large enough.
func readRecord(f vfs.File, ext Extent, buf []byte) (Header, []byte, error) {
	if int64(cap(buf)) < ext.Length {
		buf = vfs.AlignedBuffer(int(ext.Length))
	}
	buf = buf[:ext.Length]
	n, err := f.ReadAt(buf, ext.Offset)
	return decodeRead(ext, buf, n, err)
}

// decodeRead decodes the record at ext read into buf: n bytes, with err from the read.
func decodeRead(ext Extent, buf []byte, n int, err error) (Header, []byte, error) {
	if n < len(buf) {
		if err == nil || errors.Is(err, io.EOF) {
			return Header{}, nil, corruptf("read %+v: short file, got %d bytes", ext, n)
		}
		return Header{}, nil, fmt.Errorf("bucketstore: read %+v: %w", ext, err)
	}
	h, payload, err := DecodeRecord(buf)
	if err != nil {
		return Header{}, nil, fmt.Errorf("read %+v: %w", ext, err)
	}
	return h, payload, nil
}

func matchHeader(got, want Header) error {
	switch {
	case got.Key != want.Key:
		return corruptf("key %q, want %q", got.Key, want.Key)
	case got.TxnID != want.TxnID:
		return corruptf("txn %x, want %x", got.TxnID, want.TxnID)
	case got.Generation != want.Generation:
		return corruptf("generation %d, want %d", got.Generation, want.Generation)
	case got.PayloadLen != want.PayloadLen:
		return corruptf("payload length %d, want %d", got.PayloadLen, want.PayloadLen)
	case got.PayloadSum != want.PayloadSum:
		return corruptf("payload checksum %#x, want %#x", got.PayloadSum, want.PayloadSum)
	}
	return nil
}

// Buckets returns the IDs of the bucket files, ascending.
func (s *Store) Buckets() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.buckets))
}

// Stats describes the store. LiveBytes comes from accounting; FileBytes and AllocatedBytes
// are measured from the files.
type Stats struct {
	Buckets        int
	LiveBytes      int64
	FileBytes      int64
	AllocatedBytes int64
	Capacity       int64
	Syncs          uint64 // fdatasyncs issued since Open
	// FreeBytes is the free space of Dir's filesystem (statfs), -1 when the FS cannot tell;
	// Reserve is Config.Reserve, the part of it that Reserve never takes.
	FreeBytes int64
	Reserve   int64
}

// Stats measures the store.
func (s *Store) Stats() (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Stats{}, ErrClosed
	}
	st := Stats{Buckets: len(s.buckets), LiveBytes: s.live, Capacity: s.cfg.Capacity, Syncs: s.syncs.Load(),
		FreeBytes: -1, Reserve: s.reserve.Load()}
	if sr, ok := s.fs.(vfs.SpaceReporter); ok {
		if free, err := sr.FreeSpace(s.cfg.Dir); err == nil {
			st.FreeBytes = free
		}
	}
	for _, b := range s.buckets {
		size, err := b.f.Size()
		if err != nil {
			return Stats{}, fmt.Errorf("bucketstore: stat %s: %w", b.path, err)
		}
		alloc, err := b.f.AllocatedBytes()
		if err != nil {
			return Stats{}, fmt.Errorf("bucketstore: stat %s: %w", b.path, err)
		}
		st.FileBytes += size
		st.AllocatedBytes += alloc
	}
	return st, nil
}

// Close closes every bucket file and releases the lock. It does not sync.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	if invariants.Enabled {
		s.checkLocked()
	}
	var errs []error
	for _, b := range s.buckets {
		errs = append(errs, b.f.Close())
	}
	return errors.Join(append(errs, s.lock.Close())...)
}
