package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// runBatches runs batches 0..batches-1 on workers goroutines, each taking the next batch as
// it finishes one, and times every call of do. do returns a count to add up (keys stored,
// bytes read); the first error cancels the rest and is returned. It returns the total, the
// wall time and every batch's latency.
func runBatches(ctx context.Context, workers, batches int, do func(ctx context.Context, b int) (int64, error)) (int64, time.Duration, []time.Duration, error) {
	var (
		next    atomic.Int64
		total   atomic.Int64
		mu      sync.Mutex
		lats    []time.Duration
		firstEr error
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for ctx.Err() == nil {
				b := int(next.Add(1) - 1)
				if b >= batches {
					break
				}
				t0 := time.Now()
				n, err := do(ctx, b)
				mine = append(mine, time.Since(t0))
				total.Add(n)
				if err != nil {
					mu.Lock()
					if firstEr == nil {
						firstEr = err
					}
					mu.Unlock()
					cancel()
				}
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if firstEr != nil {
		return 0, el, nil, firstEr
	}
	return total.Load(), el, lats, ctx.Err()
}
