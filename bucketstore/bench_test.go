package bucketstore

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/vfs"
)

// BenchmarkAppendSync measures Reserve+WriteRecord+Sync of one record at a time on vfs.OSFS with
// O_DIRECT in b.TempDir, then, in the same run, a plain O_DIRECT sequential write + fdatasync
// of the same sizes and count. It reports the store's MB/s (SetBytes), the baseline's
// disk_MB/s and their ratio x_disk (1.0 = as fast as the raw disk pattern).
func BenchmarkAppendSync(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"256KiB", 256 << 10}, {"2MiB", 2 << 20}} {
		b.Run(size.name, func(b *testing.B) {
			payload := testkit.Payload(1, size.n)
			h := testHeader("bench/key", 1, payload)
			recSize := RecordSize(len(h.Key), len(payload))
			b.SetBytes(int64(size.n))
			storeTime := benchStore(b, h, payload, recSize)
			diskTime := benchDirect(b, recSize)
			storeRate := float64(int64(b.N)*int64(size.n)) / storeTime.Seconds()
			diskRate := float64(int64(b.N)*recSize) / diskTime.Seconds()
			b.ReportMetric(diskRate/1e6, "disk_MB/s")
			b.ReportMetric(storeRate/diskRate, "x_disk")
		})
	}
}

func benchStore(b *testing.B, h Header, payload []byte, recSize int64) time.Duration {
	cfg := DefaultConfig(b.TempDir())
	cfg.BucketSize = 256 << 20
	s := mustOpen(b, cfg)
	if !directActive(b, s) {
		b.Log("O_DIRECT not in effect: numbers are page-cache numbers")
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ext, err := s.Reserve(recSize)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.WriteRecord(ext, h, payload); err != nil {
			b.Fatal(err)
		}
		if err := s.Sync(ext.Bucket); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	return elapsed
}

// directActive reports whether the store's open bucket really uses O_DIRECT.
func directActive(b *testing.B, s *Store) bool {
	if _, err := s.Reserve(Alignment); err != nil {
		b.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return vfs.DirectIO(s.open.f)
}

// benchDirect is the baseline: n sequential O_DIRECT writes of size bytes, each followed by
// fdatasync, on a fresh file. It runs with the benchmark timer stopped.
func benchDirect(b *testing.B, size int64) time.Duration {
	f, err := vfs.OSFS{DirectIO: true}.OpenFile(filepath.Join(b.TempDir(), "baseline"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := vfs.AlignedBuffer(int(size))
	copy(buf, testkit.Payload(2, len(buf)))
	start := time.Now()
	for i := range b.N {
		if _, err := f.WriteAt(buf, int64(i)*size); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}
