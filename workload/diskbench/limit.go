package diskbench

import (
	"context"
	"fmt"
)

// SeqWriteLimit is the disk's sequential-write limit as storenode bench and storenode replay
// report it: total bytes of 1 MiB O_DIRECT writes in a scratch file in dir with one
// fdatasync at the end, measured once per depth (writes in flight), the best result returned
// (fio --rw=write --bs=1M --iodepth=1|8 --end_fsync=1; the callers give 1 and 8, then the
// depth that won). Its Job.Depth is the depth that gave it. When ctx ends it stops within a
// write and returns ctx's error wrapped.
func SeqWriteLimit(ctx context.Context, dir string, total int64, depths []int) (JobResult, error) {
	var best JobResult
	for _, depth := range depths {
		r, err := Run(ctx, Job{Dir: dir, Pattern: SeqWritePattern, Block: 1 << 20, Depth: depth, FileSize: total, EndSync: true})
		if err != nil {
			return best, fmt.Errorf("limit: sequential write, %d in flight: %w", depth, err)
		}
		if r.MBPerSec > best.MBPerSec {
			best = r
		}
	}
	return best, nil
}
