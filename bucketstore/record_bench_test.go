package bucketstore

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/vfs"
)

// BenchmarkRecordEncode measures EncodeRecord (header, xxhash64 of the payload, copy into the
// aligned buffer) on one core, for a KV block of 4 KiB, 256 KiB and 2 MiB. Beside MB/s it
// reports x_disk: the encode rate over the disk's O_DIRECT sequential write rate measured in
// the same run (diskSeqRate), so 10 means one core encodes ten times faster than the disk
// takes the records: the encode pass is not what bounds an offload.
func BenchmarkRecordEncode(b *testing.B) {
	for _, size := range recordBenchSizes {
		b.Run(size.name, func(b *testing.B) {
			h, payload, buf := benchRecord(size.n)
			b.SetBytes(int64(size.n))
			b.ResetTimer()
			for range b.N {
				if err := EncodeRecord(buf, h, payload); err != nil {
					b.Fatal(err)
				}
			}
			reportOverDisk(b, size.n)
		})
	}
}

// BenchmarkRecordEncodeCold is BenchmarkRecordEncode of 256 KiB blocks cycling through 64 MiB
// of payloads and records, so that, as in an offload, neither the payload nor the buffer is
// in the CPU's cache when it is encoded (BenchmarkRecordEncode's is: one payload, one buffer).
func BenchmarkRecordEncodeCold(b *testing.B) {
	const size, count = 256 << 10, 256
	h, payload, _ := benchRecord(size)
	payloads, bufs := make([][]byte, count), make([][]byte, count)
	for i := range payloads {
		payloads[i] = append([]byte(nil), payload...)
		bufs[i] = vfs.AlignedBuffer(int(RecordSize(len(h.Key), size)))
	}
	b.SetBytes(size)
	b.ResetTimer()
	for i := range b.N {
		if err := EncodeRecord(bufs[i%count], h, payloads[i%count]); err != nil {
			b.Fatal(err)
		}
	}
	reportOverDisk(b, size)
}

// BenchmarkRecordVerify measures DecodeRecord (header checks and the xxhash64 of the payload
// against the header's sum: what every read does before it returns bytes) on one core, with
// x_disk as in BenchmarkRecordEncode.
func BenchmarkRecordVerify(b *testing.B) {
	for _, size := range recordBenchSizes {
		b.Run(size.name, func(b *testing.B) {
			h, payload, buf := benchRecord(size.n)
			if err := EncodeRecord(buf, h, payload); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size.n))
			b.ResetTimer()
			for range b.N {
				if _, _, err := DecodeRecord(buf); err != nil {
					b.Fatal(err)
				}
			}
			reportOverDisk(b, size.n)
		})
	}
}

var recordBenchSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"256KiB", 256 << 10}, {"2MiB", 2 << 20}}

// benchRecord returns a header, a random payload of n bytes and an aligned buffer for the record.
func benchRecord(n int) (Header, []byte, []byte) {
	payload := testkit.Payload(1, n)
	h := testHeader("bench/key", 1, payload)
	return h, payload, vfs.AlignedBuffer(int(RecordSize(len(h.Key), len(payload))))
}

// reportOverDisk reports the benchmark's payload rate over the disk's sequential write rate.
func reportOverDisk(b *testing.B, size int) {
	b.StopTimer()
	rate := float64(int64(b.N)*int64(size)) / b.Elapsed().Seconds()
	disk := diskSeqRate(b)
	b.ReportMetric(disk/1e6, "disk_MB/s")
	b.ReportMetric(rate/disk, "x_disk")
}

var diskOnce struct {
	sync.Once
	rate float64
}

// diskSeqRate is the disk's limit, measured once per run: 64 MiB of sequential O_DIRECT 1 MiB
// writes to a fresh file in the temporary directory and one fdatasync, in bytes per second.
func diskSeqRate(b *testing.B) float64 {
	diskOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kvoffload-disk")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
		f, err := vfs.OSFS{DirectIO: true}.OpenFile(filepath.Join(dir, "limit"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		const block, total = 1 << 20, 64 << 20
		buf := vfs.AlignedBuffer(block)
		copy(buf, testkit.Payload(3, block))
		start := time.Now()
		for off := int64(0); off < total; off += block {
			if _, err := f.WriteAt(buf, off); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		diskOnce.rate = total / time.Since(start).Seconds()
	})
	return diskOnce.rate
}
