package bucketstore

import (
	"cmp"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/kvoffload/kvoffload/vfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// allocFS is memfs with the Allocator capability, recording every Allocate call.
type allocFS struct {
	vfs.FS
	mu    sync.Mutex
	calls [][2]int64 // off, length
	full  bool       // Allocate grows the file by half the range, then fails with ENOSPC (as ext4 can)
	grow  bool       // Allocate grows the file over the range, as fallocate mode 0 does
	read  int64      // bytes read through the FS's files
	free  int64      // FreeBytes; 0 means 1 TiB
}

type allocFile struct {
	vfs.File
	fs *allocFS
}

func (a *allocFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := a.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return allocFile{File: f, fs: a}, nil
}

func (f allocFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.fs.mu.Lock()
	f.fs.read += int64(n)
	f.fs.mu.Unlock()
	return n, err
}

func (f allocFile) FreeBytes() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return cmp.Or(f.fs.free, 1<<40), nil
}

func (f allocFile) Allocate(off, length int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.fs.calls = append(f.fs.calls, [2]int64{off, length})
	if f.fs.grow {
		return f.Truncate(off + length)
	}
	if f.fs.full {
		if err := f.Truncate(off + length/2); err != nil {
			return err
		}
		return syscall.ENOSPC
	}
	return nil
}

// TestBucketAllocationDoubles: a default-size bucket is allocated 64 MiB at its first
// reservation and then by doubling what is allocated, so a GiB costs 5 fallocates (on ext4
// each waits for the writes in flight on the file, under the store's lock), not one per
// 64 MiB, and never more than the bucket holds plus 64 MiB ahead.
func TestBucketAllocationDoubles(t *testing.T) {
	fsys := &allocFS{FS: memfs.New()}
	s := mustOpen(t, Config{Dir: testDir, FS: fsys, BucketSize: DefaultBucketSize})
	const size = 1 << 20
	for i := range 1020 { // a whole bucket, less room for the run below
		if _, err := s.Reserve(size); err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
	}
	if _, err := s.ReserveRun([]int64{size, size, size}); err != nil {
		t.Fatal(err)
	}
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	want := [][2]int64{{0, 64 << 20}, {64 << 20, 64 << 20}, {128 << 20, 128 << 20}, {256 << 20, 256 << 20}, {512 << 20, 512 << 20}}
	if !slices.Equal(fsys.calls, want) {
		t.Fatalf("Allocate calls (offset, length) %v, want %v", fsys.calls, want)
	}
}

// TestFailedAllocationCutBack: a preallocation that fails after taking part of the range (ext4
// keeps what it got on ENOSPC) is cut back, so the disk it took is free again for the WAL and
// the Raft log, and the bucket is not preallocated again: its writes extend the file.
func TestFailedAllocationCutBack(t *testing.T) {
	fsys := &allocFS{FS: memfs.New(), full: true}
	s := mustOpen(t, Config{Dir: testDir, FS: fsys, BucketSize: DefaultBucketSize})
	w := mustPut(t, s, "k", 1, 1000)
	st := mustStats(t, s)
	if st.FileBytes != w.ext.End() || st.AllocatedBytes != w.ext.Length {
		t.Fatalf("after a failed preallocation: file %d bytes, allocated %d, want the record's %d", st.FileBytes, st.AllocatedBytes, w.ext.End())
	}
	mustRead(t, s, w)
	mustPut(t, s, "k2", 1, 1000)
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if len(fsys.calls) != 1 {
		t.Fatalf("Allocate calls %v, want one: a failed bucket is not preallocated again", fsys.calls)
	}
}

// TestScanStopsAtTheTail: Scan of a bucket being written reads its records, not the 64 MiB
// of zeros allocated ahead of them.
func TestScanStopsAtTheTail(t *testing.T) {
	fsys := &allocFS{FS: memfs.New(), grow: true}
	s := mustOpen(t, Config{Dir: testDir, FS: fsys, BucketSize: DefaultBucketSize})
	w := mustPut(t, s, "k", 1, 1000)
	if st := mustStats(t, s); st.FileBytes != preallocFirst {
		t.Fatalf("file %d bytes, want %d allocated ahead", st.FileBytes, preallocFirst)
	}
	records := 0
	if err := s.Scan(func(ext Extent, h Header, err error) error {
		if err != nil {
			return err
		}
		records++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if records != 1 || fsys.read > 2*w.ext.End() { // a block to find the record, then the record
		t.Fatalf("Scan found %d records reading %d bytes, want 1 record and at most twice the tail's %d bytes", records, fsys.read, w.ext.End())
	}
}

// TestNoPreallocationOnANearlyFullDisk: an allocation ahead that would take more than half of
// the free space is not made (the bucket's writes extend the file instead), so a nearly full
// disk keeps room for the WAL and the Raft log.
func TestNoPreallocationOnANearlyFullDisk(t *testing.T) {
	fsys := &allocFS{FS: memfs.New(), free: 130 << 20}
	s := mustOpen(t, Config{Dir: testDir, FS: fsys, BucketSize: DefaultBucketSize})
	for i := range 40 { // the first 64 MiB fits in half of 130 MiB free; the next 64, in 66 MiB free, does not
		if _, err := s.Reserve(1 << 20); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			fsys.mu.Lock()
			fsys.free -= 64 << 20
			fsys.mu.Unlock()
		}
	}
	for range 40 {
		if _, err := s.Reserve(1 << 20); err != nil {
			t.Fatal(err)
		}
	}
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if want := [][2]int64{{0, 64 << 20}}; !slices.Equal(fsys.calls, want) {
		t.Fatalf("Allocate calls %v, want %v: none past half of the free space", fsys.calls, want)
	}
}
