package wal

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// BenchmarkAppend measures group commit: 32 goroutines each Append one RecordIntent at a time
// (payload 16 KiB, about a 256-key intent) and wait until it is durable. It reports appends/s,
// records_per_fsync (Stats.Records / Stats.Batches: how many transactions share one fsync) and
// x_disk: appends/s over the rate of a single writer doing write + fdatasync of the same size
// to a plain file in the same directory and run (what a log without group commit could do).
func BenchmarkAppend(b *testing.B) {
	const writers, payload = 32, 16 << 10
	dir := b.TempDir()
	l, _, err := Open(DefaultConfig(filepath.Join(dir, "wal")))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	body := make([]byte, payload)
	var wg sync.WaitGroup
	work := make(chan int)
	b.ResetTimer()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				rec := Record{Type: RecordIntent, Payload: body}
				rec.TxnID[0], rec.TxnID[1], rec.TxnID[2] = byte(w), byte(i), byte(i>>8)
				if _, err := l.Append(rec); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	for i := range b.N {
		work <- i
	}
	close(work)
	wg.Wait()
	b.StopTimer()
	rate := float64(b.N) / b.Elapsed().Seconds()
	st := l.Stats()
	disk := syncedWriteRate(b, dir, payload)
	b.ReportMetric(rate, "appends/s")
	b.ReportMetric(float64(st.Records)/float64(max(st.Batches, 1)), "records_per_fsync")
	b.ReportMetric(disk, "disk_syncs/s")
	b.ReportMetric(rate/disk, "x_disk")
}

// syncedWriteRate is the baseline: appends of size bytes to a fresh file in dir, each followed
// by fdatasync, for about half a second; it returns appends per second.
func syncedWriteRate(b *testing.B, dir string, size int) float64 {
	f, err := os.Create(filepath.Join(dir, "baseline"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, size)
	n, start := 0, time.Now()
	for time.Since(start) < 500*time.Millisecond {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds()
}
