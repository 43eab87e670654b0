package bucketstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/vfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// diskFS is memfs on a disk of size bytes: FreeSpace is size less the bytes allocated to the
// files of the directory asked about.
type diskFS struct {
	vfs.FS
	size int64
}

func (d diskFS) FreeSpace(dir string) (int64, error) {
	names, err := d.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	used := int64(0)
	for _, name := range names {
		f, err := d.OpenFile(filepath.Join(dir, name), os.O_RDONLY, 0)
		if err != nil {
			return 0, err
		}
		n, err := f.AllocatedBytes()
		_ = f.Close()
		if err != nil {
			return 0, err
		}
		used += n
	}
	return d.size - used, nil
}

// The reserve is never reserved: a reservation that would leave less free than Reserve is
// refused with a DiskFullError naming the free bytes and the reserve, reserved-but-unwritten
// bytes count as taken, and freed bytes can be reserved again.
func TestReserveKeepsTheFreeSpaceReserve(t *testing.T) {
	const rec = 16 * Alignment
	cfg := memConfig(diskFS{FS: memfs.New(), size: 40 * Alignment})
	cfg.Reserve = 20 * Alignment
	s := mustOpen(t, cfg)

	w := mustPut(t, s, "a", 1, int(rec-RecordSize(1, 0))) // 16 blocks written: 24 free
	if w.ext.Length != rec {
		t.Fatalf("record of %d bytes, want %d", w.ext.Length, rec)
	}
	_, err := s.Reserve(8 * Alignment) // would leave 16 < 20
	var full *DiskFullError
	if !errors.As(err, &full) || !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Reserve past the reserve: %v, want a DiskFullError", err)
	}
	if full.Free != 24*Alignment || full.Reserve != 20*Alignment || full.Size != 8*Alignment {
		t.Fatalf("DiskFullError %+v: want Free %d, Reserve %d, Size %d", full, 24*Alignment, 20*Alignment, 8*Alignment)
	}
	for _, want := range []string{"98304 bytes free", "reserve 81920 bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := s.ReserveRun([]int64{4 * Alignment, 4 * Alignment}); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("ReserveRun past the reserve: %v, want ErrDiskFull", err)
	}

	// Reserved and not yet written counts as taken: 4 blocks fit once, not twice.
	ext, err := s.Reserve(4 * Alignment)
	if err != nil {
		t.Fatalf("Reserve within the free space: %v", err)
	}
	if _, err := s.Reserve(4 * Alignment); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("second Reserve while the first is unwritten: %v, want ErrDiskFull", err)
	}
	if err := s.Free(ext); err != nil {
		t.Fatal(err)
	}

	// Freeing the record gives its blocks back: a record of its size fits again.
	if err := s.Free(w.ext); err != nil {
		t.Fatal(err)
	}
	if st := mustStats(t, s); st.FreeBytes != 40*Alignment || st.Reserve != 20*Alignment {
		t.Fatalf("Stats FreeBytes %d, Reserve %d: want %d, %d", st.FreeBytes, st.Reserve, 40*Alignment, 20*Alignment)
	}
	mustRead(t, s, mustPut(t, s, "b", 2, int(rec-RecordSize(1, 0))))
}

// Without a SpaceReporter, or with Reserve 0, the free space is not checked.
func TestReserveUncheckedWithoutSpaceReporter(t *testing.T) {
	cfg := memConfig(nil)
	cfg.Reserve = 1 << 40
	s := mustOpen(t, cfg)
	mustPut(t, s, "a", 1, 100)
}

// Allocating ahead never takes the reserve: with 100 MiB free and an 80 MiB reserve, the
// first 64 MiB allocation of a bucket is skipped (writes extend the file instead).
func TestPreallocationLeavesTheReserve(t *testing.T) {
	fsys := &allocFS{FS: memfs.New(), free: 100 << 20}
	s := mustOpen(t, Config{Dir: testDir, FS: fsys, BucketSize: DefaultBucketSize, Reserve: 80 << 20})
	mustRead(t, s, mustPut(t, s, "k", 1, 1000))
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if len(fsys.calls) != 0 {
		t.Fatalf("Allocate calls %v, want none: 64 MiB would take the 80 MiB reserve of 100 MiB free", fsys.calls)
	}
}

// SetReserve applies to the reservations that follow.
func TestSetReserve(t *testing.T) {
	s := mustOpen(t, memConfig(diskFS{FS: memfs.New(), size: 40 * Alignment}))
	s.SetReserve(36 * Alignment)
	if _, err := s.Reserve(8 * Alignment); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Reserve after SetReserve: %v, want ErrDiskFull", err)
	}
	s.SetReserve(0)
	mustPut(t, s, "a", 1, 100)
}
