package diskbench

import (
	"context"
	"os"
	"sync/atomic"
	"time"
)

// seqBatches is Run for SeqWritePattern with Batch > 0: the store's offload shape on the bare
// disk. Each of j.Depth goroutines claims the next run of j.Batch blocks of the file, writes
// them one after another and fdatasyncs, as a writer's batch is written and made durable
// before its commit; P99 is the latency of a run, from its first write to the end of its
// fdatasync, with every goroutine's runs queued on the device together. fio has no per-run
// latency; its closest job is --rw=write --bs=<block> --numjobs=<depth> --fdatasync=<batch>.
func seqBatches(ctx context.Context, j Job, f *os.File, ops int64, direct bool) (JobResult, error) {
	var next atomic.Int64 // blocks claimed
	start := time.Now()
	lats, err := writers(ctx, j, func(_ int, buf []byte, failed func() bool) ([]time.Duration, error) {
		var lat []time.Duration
		for !failed() {
			first := next.Add(j.Batch) - j.Batch
			if first >= ops {
				break
			}
			t0 := time.Now()
			for i := first; i < min(first+j.Batch, ops); i++ {
				if err := writeAt(f, j, buf, i*int64(j.Block)); err != nil {
					return lat, err
				}
			}
			if err := datasync(f); err != nil {
				return lat, err
			}
			lat = append(lat, time.Since(t0))
		}
		return lat, nil
	})
	if err != nil {
		return JobResult{}, err
	}
	return result(j, ops, time.Since(start), direct, lats), nil
}
