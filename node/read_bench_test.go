package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/workload/diskbench"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// BenchmarkBatchGet measures the read path against the disk's O_DIRECT random-read limit
// measured in the same directory afterwards (x_disk): one reader with batches of 64 x 256 KiB
// (the txn read fan-out, Config.ReadsInFlight, is all the parallelism), 32 readers with
// batches of 16 x 256 KiB (storenode bench's get_ratio; the limit is 32 in flight), and 32
// readers with batches of 256 x 4 KiB (the 4 KiB IOPS limit, 32 in flight). Reads are O_DIRECT, so the
// page cache plays no part. Keys are written before the clock starts; each batch is a random
// run of consecutive keys (one request's prefix), seeded.
func BenchmarkBatchGet(b *testing.B) {
	b.Run("one-reader-64x256KiB", func(b *testing.B) { benchGet(b, 1, 64, 256<<10, 512, 0) })
	b.Run("32-readers-16x256KiB", func(b *testing.B) { benchGet(b, 32, 16, 256<<10, 2048, 0) })
	b.Run("32-readers-256x4KiB", func(b *testing.B) { benchGet(b, 32, 256, 4<<10, 16384, 0) })
}

// BenchmarkReadsInFlight is the one-reader BatchGet at several txn.Config.ReadsInFlight, side
// by side.
func BenchmarkReadsInFlight(b *testing.B) {
	for _, inFlight := range []int{16, 32, 64} {
		b.Run(fmt.Sprintf("in-flight=%d", inFlight), func(b *testing.B) { benchGet(b, 1, 64, 256<<10, 512, inFlight) })
	}
}

// benchGet runs readers BatchGet loops of batch keys of block bytes over keys keys, with
// inFlight reads in flight per BatchGet (0: the default).
func benchGet(b *testing.B, readers, batch, block, keys, inFlight int) {
	dir := b.TempDir()
	cfg := DefaultConfig(dir)
	if inFlight > 0 {
		cfg.Txn.ReadsInFlight = inFlight
	}
	n, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	names := make([]string, keys)
	for start := 0; start < keys; start += 256 {
		objs := make([]kvoffload.Object, 0, 256)
		for i := start; i < min(start+256, keys); i++ {
			names[i] = fmt.Sprintf("get@%d", i)
			objs = append(objs, kvoffload.Object{Key: names[i], Value: trace.Payload(1, names[i], block)})
		}
		if _, err := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objs); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(batch * block))
	b.ResetTimer()
	readBatches(b, readers, b.N, 1, func(rng *rand.Rand, _ [][]byte) ([]kvoffload.GetResult, error) {
		first := rng.IntN(keys - batch + 1)
		return n.BatchGet(context.Background(), names[first:first+batch])
	}, batch, block)
	b.StopTimer()
	secs := b.Elapsed().Seconds()
	keysPerS := float64(int64(b.N)*int64(batch)) / secs
	depth, file := 32, int64(keys)*int64(block)
	lim, err := diskbench.Run(context.Background(), diskbench.Job{Dir: dir, Pattern: diskbench.RandReadPattern, Block: block, Depth: depth,
		FileSize: max(file, 64<<20), Ops: int64(max(4096, 64<<20/block)), Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(keysPerS, "keys/s")
	b.ReportMetric(lim.IOPS, "limit_IOPS")
	b.ReportMetric(keysPerS/lim.IOPS, "x_disk")
}

// readBatches runs batches calls of get from readers goroutines (each with its own rng, seeded
// with its number and stream, and batch buffers of block bytes it may read into) and fails b
// unless every key of every answer is Found with block bytes.
func readBatches(b *testing.B, readers, batches int, stream uint64, get func(rng *rand.Rand, bufs [][]byte) ([]kvoffload.GetResult, error), batch, block int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), stream))
			bufs := make([][]byte, batch)
			for i := range bufs {
				bufs[i] = make([]byte, block)
			}
			for next.Add(1) <= int64(batches) {
				res, err := get(rng, bufs)
				if err != nil {
					b.Error(err)
					return
				}
				for _, g := range res {
					if g.Status != kvoffload.Found || len(g.Value) != block {
						b.Errorf("%s: %s %s", g.Key, g.Status, g.Reason)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
