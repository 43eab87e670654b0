package bucketstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/vfs"
	"github.com/kvoffload/kvoffload/vfs/errorfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// A run reserved with ReserveRun is back to back, is written with one write per MaxRunBytes,
// and every record of it reads back verified, before and after a reopen.
func TestReserveRunWriteRecords(t *testing.T) {
	r := testkit.Rand(t)
	writes := 0
	fsys := errorfs.Wrap(memfs.New(), func(op errorfs.Op, name string) error {
		if op == errorfs.OpWrite {
			writes++
		}
		return nil
	})
	cfg := memConfig(fsys)
	cfg.BucketSize = 64 << 20
	s := mustOpen(t, cfg)
	var recs []RecordWrite
	var sizes []int64
	for i := range 40 {
		key := fmt.Sprintf("run/%d", i)
		payload := testkit.Payload(uint64(i), 1+r.IntN(300<<10))
		recs = append(recs, RecordWrite{Header: testHeader(key, uint64(i), payload), Payload: payload})
		sizes = append(sizes, RecordSize(len(key), len(payload)))
	}
	exts, err := s.ReserveRun(sizes)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for i, e := range exts {
		if i > 0 && e.Offset != exts[i-1].End() || e.Bucket != exts[0].Bucket || e.Length != sizes[i] {
			t.Fatalf("extent %d %+v does not follow %+v", i, e, exts[max(i-1, 0)])
		}
		recs[i].Ext = e
		total += e.Length
	}
	before := writes
	for i, err := range s.WriteRecords(recs) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	// Each run is at most MaxRunBytes, so a few writes, not 40.
	if got, most := writes-before, int(total/MaxRunBytes)+2; got > most {
		t.Fatalf("%d writes for %d bytes in %d records, want at most %d", got, total, len(recs), most)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		for _, rec := range recs {
			mustRead(t, s, written{ext: rec.Ext, h: rec.Header, payload: rec.Payload})
		}
	}
	check(s)
	mustClose(t, s)
	check(mustOpen(t, cfg))
}

// ReserveRun is all or nothing: over the quota it reserves nothing, and the caller falls back
// to record-by-record reservations.
func TestReserveRunAllOrNothing(t *testing.T) {
	cfg := memConfig(nil)
	cfg.Capacity = 10 * Alignment
	s := mustOpen(t, cfg)
	if _, err := s.ReserveRun([]int64{4 * Alignment, 4 * Alignment, 4 * Alignment}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a run over the quota: %v, want ErrNoSpace", err)
	}
	if st := mustStats(t, s); st.LiveBytes != 0 {
		t.Fatalf("a refused run left %d bytes live", st.LiveBytes)
	}
	if _, err := s.ReserveRun([]int64{4 * Alignment, 100}); err == nil {
		t.Fatal("a size that is not a multiple of Alignment was accepted")
	}
	if _, err := s.ReserveRun([]int64{cfg.BucketSize, Alignment}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a run over BucketSize: %v, want ErrTooLarge", err)
	}
}

// A failed write fails every record of its run and none of the others.
func TestWriteRecordsFailedRun(t *testing.T) {
	n := 0
	fsys := errorfs.Wrap(memfs.New(), func(op errorfs.Op, name string) error {
		if op == errorfs.OpWrite {
			if n++; n == 1 {
				return syscall.EIO
			}
		}
		return nil
	})
	cfg := memConfig(fsys)
	cfg.BucketSize = 64 << 20
	s := mustOpen(t, cfg)
	var recs []RecordWrite
	for i := range 4 {
		key := fmt.Sprintf("f/%d", i)
		payload := testkit.Payload(uint64(i), 3<<20) // 3 MiB: two records per 8 MiB run
		recs = append(recs, RecordWrite{Header: testHeader(key, uint64(i), payload), Payload: payload})
	}
	sizes := make([]int64, len(recs))
	for i, rec := range recs {
		sizes[i] = RecordSize(len(rec.Header.Key), len(rec.Payload))
	}
	exts, err := s.ReserveRun(sizes)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		recs[i].Ext = exts[i]
	}
	errs := s.WriteRecords(recs)
	if errs[0] == nil || errs[1] == nil || errs[2] != nil || errs[3] != nil {
		t.Fatalf("errors %v: want the first run (records 0 and 1) failed, the second written", errs)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	mustRead(t, s, written{ext: recs[2].Ext, h: recs[2].Header, payload: recs[2].Payload})
}

// A run that runs out of space fails only the records that do not fit (docs/design.md): a
// small record and a large one, in either order, on a filesystem with room for the small one
// and half of the large one (so the run's pwrite is short). The small one is written, the
// large one fails with ENOSPC and gives back the blocks its short write took, and the small
// one, written again on its own, is covered by the next Sync: it survives a crash after it.
func TestWriteRecordsOutOfSpace(t *testing.T) {
	for _, bigFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("bigFirst=%v", bigFirst), func(t *testing.T) {
			m := memfs.New()
			small := RecordWrite{Payload: testkit.Payload(1, 4<<10)}
			small.Header = testHeader("small", 1, small.Payload)
			big := RecordWrite{Payload: testkit.Payload(2, 1<<20)}
			big.Header = testHeader("big", 2, big.Payload)
			recs := []RecordWrite{small, big}
			if bigFirst {
				recs = []RecordWrite{big, small}
			}
			sizes := make([]int64, len(recs))
			for i, rec := range recs {
				sizes[i] = RecordSize(len(rec.Header.Key), len(rec.Payload))
			}
			const room = 1 << 20 // the small record and half of the big one
			fsys := &fullFS{FS: m, free: room}
			cfg := memConfig(fsys)
			cfg.BucketSize = 64 << 20
			s := mustOpen(t, cfg)
			exts, err := s.ReserveRun(sizes)
			if err != nil {
				t.Fatal(err)
			}
			for i := range recs {
				recs[i].Ext = exts[i]
			}
			syncs := mustStats(t, s).Syncs
			errs := s.WriteRecords(recs)
			smallAt := 0
			if bigFirst {
				smallAt = 1
			}
			if errs[smallAt] != nil || !errors.Is(errs[1-smallAt], syscall.ENOSPC) {
				t.Fatalf("errors %v: want the small record written, the big one failed with ENOSPC", errs)
			}
			fsys.mu.Lock()
			free := fsys.free
			fsys.mu.Unlock()
			if want := room - recs[smallAt].Ext.Length; free != want {
				t.Fatalf("%d bytes free after the write, want %d: the failed record keeps blocks", free, want)
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			if got := mustStats(t, s).Syncs; got != syncs+1 {
				t.Fatalf("%d fdatasyncs after the write, want 1", got-syncs)
			}
			w := written{ext: recs[smallAt].Ext, h: recs[smallAt].Header, payload: recs[smallAt].Payload}
			mustRead(t, s, w)
			cfg.FS = m.Crash(memfs.CrashDropAll, testkit.Rand(t))
			mustRead(t, mustOpen(t, cfg), w)
		})
	}
}

// fullFS is memfs with room for free more bytes. A write takes a block of Alignment bytes
// for each block it touches that its file does not have yet; when none is left it stops at
// the last block it could take and returns the bytes written and ENOSPC, as a short pwrite
// on Linux does. PunchHole gives back the blocks wholly inside its range; Truncate and
// Remove give nothing back.
type fullFS struct {
	vfs.FS
	mu     sync.Mutex
	free   int64
	blocks map[string]map[int64]bool // the blocks each file has taken, by index
}

type fullFile struct {
	vfs.File
	fs   *fullFS
	name string
}

func (f *fullFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return fullFile{File: file, fs: f, name: name}, nil
}

// taken returns the blocks the file name has taken; f.mu must be held.
func (f *fullFS) taken(name string) map[int64]bool {
	if f.blocks == nil {
		f.blocks = map[string]map[int64]bool{}
	}
	if f.blocks[name] == nil {
		f.blocks[name] = map[int64]bool{}
	}
	return f.blocks[name]
}

func (f fullFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	taken, n := f.fs.taken(f.name), len(p)
	for pos := off; pos < off+int64(len(p)); pos = (pos/Alignment + 1) * Alignment {
		if taken[pos/Alignment] {
			continue
		}
		if f.fs.free < Alignment {
			n = int(pos - off)
			break
		}
		f.fs.free -= Alignment
		taken[pos/Alignment] = true
	}
	written, err := f.File.WriteAt(p[:n], off)
	if err == nil && n < len(p) {
		err = &fs.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
	}
	return written, err
}

func (f fullFile) PunchHole(off, length int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	taken := f.fs.taken(f.name)
	for idx := (off + Alignment - 1) / Alignment; (idx+1)*Alignment <= off+length; idx++ {
		if taken[idx] {
			delete(taken, idx)
			f.fs.free += Alignment
		}
	}
	return f.File.PunchHole(off, length)
}
