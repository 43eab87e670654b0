package bench

import (
	"context"
	"fmt"

	"github.com/kvoffload/kvoffload/workload/diskbench"
)

// The disk's limits, each measured with diskbench.Run on an O_DIRECT scratch file in the
// bench directory (the fio equivalents are in docs/benchmarks.md).

// limitBatches is the offload's own shape on the bare disk: writers goroutines, each writing
// batches of batch blocks of block bytes (O_DIRECT, sequential in one file) and fdatasyncing
// each, bytes in all; its P99 is per batch, the like-for-like limit of the offload's p99
// batch latency (diskbench.Job.Batch).
func limitBatches(ctx context.Context, dir string, bytes int64, block, writers, batch int) (diskbench.JobResult, error) {
	r, err := diskbench.Run(ctx, diskbench.Job{Dir: dir, Pattern: diskbench.SeqWritePattern, Block: block,
		Depth: writers, FileSize: bytes, Batch: int64(batch)})
	if err != nil {
		return r, fmt.Errorf("limit: batches of %d x %d bytes, %d writers: %w", batch, block, writers, err)
	}
	return r, nil
}

// limitRead is O_DIRECT random reads of 256 KiB with 32 in flight over a file of fileBytes
// laid out first, as many reads as the file has blocks (fio --rw=randread --bs=256k
// --iodepth=32).
func limitRead(ctx context.Context, dir string, fileBytes int64, seed uint64) (diskbench.JobResult, error) {
	const block = 256 << 10
	r, err := diskbench.Run(ctx, diskbench.Job{Dir: dir, Pattern: diskbench.RandReadPattern, Block: block, Depth: 32,
		FileSize: fileBytes, Ops: max(1, fileBytes/block), Seed: seed})
	if err != nil {
		return r, fmt.Errorf("limit: random 256 KiB read: %w", err)
	}
	return r, nil
}

// limitWriteIOPS is O_DIRECT random 4 KiB writes, 32 in flight, an fdatasync after every 256
// writes and one at the end (fio --rw=randwrite --bs=4k --iodepth=32 --fsync=256
// --end_fsync=1).
func limitWriteIOPS(ctx context.Context, dir string, fileBytes, ops int64, seed uint64) (diskbench.JobResult, error) {
	r, err := diskbench.Run(ctx, diskbench.Job{Dir: dir, Pattern: diskbench.RandWritePattern, Block: 4096, Depth: 32,
		FileSize: fileBytes, Ops: ops, SyncEvery: 256, EndSync: true, Seed: seed})
	if err != nil {
		return r, fmt.Errorf("limit: random 4 KiB write: %w", err)
	}
	return r, nil
}

// limitReadIOPS is O_DIRECT random 4 KiB reads, 32 in flight (fio --rw=randread --bs=4k
// --iodepth=32).
func limitReadIOPS(ctx context.Context, dir string, fileBytes, ops int64, seed uint64) (diskbench.JobResult, error) {
	r, err := diskbench.Run(ctx, diskbench.Job{Dir: dir, Pattern: diskbench.RandReadPattern, Block: 4096, Depth: 32,
		FileSize: fileBytes, Ops: ops, Seed: seed})
	if err != nil {
		return r, fmt.Errorf("limit: random 4 KiB read: %w", err)
	}
	return r, nil
}
