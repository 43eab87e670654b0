package diskbench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/kvoffload/kvoffload/vfs"
)

// randRead is Run for RandReadPattern: ops reads of j.Block bytes at random block offsets of
// the laid-out file at path, j.Depth in flight through vfs.ReadBatch, the engine the store's
// BatchGet uses, so that the limit and the store issue their reads the same way.
func randRead(ctx context.Context, j Job, path string, ops, blocks int64, direct bool) (JobResult, error) {
	fs := vfs.OSFS{DirectIO: direct}
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return JobResult{}, fmt.Errorf("diskbench: %w", err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(j.Seed, 1))
	offs := make([]int64, ops)
	for i := range offs {
		offs[i] = rng.Int64N(blocks) * int64(j.Block)
	}
	free := make(chan []byte, j.Depth) // one buffer per read in flight
	for range j.Depth {
		free <- vfs.AlignedBuffer(j.Block)
	}
	bufs := make([][]byte, ops)
	t0 := make([]time.Time, ops)
	lats := make([]time.Duration, ops)
	errs := make(chan error, 1) // the first read error
	start := time.Now()
	vfs.ReadBatch(fs, int(ops), j.Depth, func(i int) (vfs.File, []byte, int64, bool) {
		if ctx.Err() != nil {
			return nil, nil, 0, false // no new read once ctx has ended
		}
		bufs[i] = <-free
		t0[i] = time.Now()
		return f, bufs[i], offs[i], true
	}, func(i, n int, err error) {
		lats[i] = time.Since(t0[i])
		if err != nil {
			select {
			case errs <- fmt.Errorf("diskbench: %s at %d: %w", j.Pattern, offs[i], err):
			default:
			}
		}
		free <- bufs[i]
	})
	el := time.Since(start)
	select {
	case err := <-errs:
		return JobResult{}, err
	default:
	}
	if err := ctx.Err(); err != nil {
		return JobResult{}, fmt.Errorf("diskbench: %w", err)
	}
	return result(j, ops, el, direct, lats), nil
}
