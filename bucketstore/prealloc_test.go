package bucketstore

import (
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/kvoffload/kvoffload/vfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// allocFS is memfs with the Allocator capability, recording every Allocate call.
type allocFS struct {
	vfs.FS
	mu    sync.Mutex
	calls [][2]int64 // off, length
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

func (f allocFile) Allocate(off, length int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.fs.calls = append(f.fs.calls, [2]int64{off, length})
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
