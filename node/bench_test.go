package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/workload/diskbench"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// BenchmarkBatchOffload measures end-to-end offload throughput (32 concurrent clients, batches
// of 16 blocks) and reports it as a ratio to the disk's own O_DIRECT sequential write +
// fdatasync limit measured in the same run and directory (x_disk), so figures compare across disks.
func BenchmarkBatchOffload(b *testing.B) {
	for _, block := range []int{256 << 10, 2 << 20} {
		b.Run(fmt.Sprintf("block=%dKiB", block>>10), func(b *testing.B) { benchOffload(b, block) })
	}
}

func benchOffload(b *testing.B, block int) {
	const clients, batch = 32, 16
	dir := b.TempDir()
	cfg := DefaultConfig(dir)
	n, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	// Payloads are made before the clock starts: the benchmark measures the store.
	payloads := make([][]byte, 64)
	for i := range payloads {
		payloads[i] = trace.Payload(uint64(i), "bench", block)
	}
	var seq atomic.Int64
	b.SetBytes(int64(block * batch))
	b.ResetTimer()
	var wg sync.WaitGroup
	var next atomic.Int64
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				objs := make([]kvoffload.Object, batch)
				for i := range objs {
					s := seq.Add(1)
					objs[i] = kvoffload.Object{Key: fmt.Sprintf("bench@%d", s), Value: payloads[s%int64(len(payloads))]}
				}
				if _, err := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objs); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	mbps := float64(int64(b.N)*int64(block*batch)) / 1e6 / b.Elapsed().Seconds()
	disk, err := diskbench.SeqWriteLimit(context.Background(), dir, 512<<20, []int{1})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(mbps, "MB/s")
	b.ReportMetric(disk.MBPerSec, "disk_MB/s")
	b.ReportMetric(mbps/disk.MBPerSec, "x_disk")
}

// BenchmarkSmallCommits measures per-key cost: 32 clients offloading batches of 256 objects of
// 64 bytes, so the disk's bandwidth plays no part and the WAL intent, the record writes, the
// fdatasync, the Raft commit and the FSM apply of each batch are what is measured (keys/s).
// issue 9's target is 200,000 keys/s on one node.
func BenchmarkSmallCommits(b *testing.B) {
	const clients, batch = 32, 256
	n, err := Open(context.Background(), DefaultConfig(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	value := make([]byte, 64)
	var seq, next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				objs := make([]kvoffload.Object, batch)
				for i := range objs {
					objs[i] = kvoffload.Object{Key: fmt.Sprintf("small@%d", seq.Add(1)), Value: value}
				}
				if _, err := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objs); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(int64(b.N)*batch)/b.Elapsed().Seconds(), "keys/s")
}
