package bucketstore

import (
	"os"
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

// TestBucketAllocatedWholeAtFirstReserve: a default-size bucket is allocated once, whole, at
// its first reservation, not step by step while writes to it are in flight (on ext4 each
// fallocate waits for them all under the store's lock).
func TestBucketAllocatedWholeAtFirstReserve(t *testing.T) {
	fsys := &allocFS{FS: memfs.New()}
	s := mustOpen(t, Config{Dir: testDir, FS: fsys, BucketSize: DefaultBucketSize})
	const size = 1 << 20
	for i := range 300 { // 300 MiB: several of the earlier 64 MiB steps
		if _, err := s.Reserve(size); err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
	}
	if _, err := s.ReserveRun([]int64{size, size, size}); err != nil {
		t.Fatal(err)
	}
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if want := [][2]int64{{0, DefaultBucketSize}}; len(fsys.calls) != 1 || fsys.calls[0] != want[0] {
		t.Fatalf("Allocate calls %v, want %v", fsys.calls, want)
	}
}
