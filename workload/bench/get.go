package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"
)

// read is one BatchGet workload: every key of Keys once, in a shuffled order (Seed), in
// batches of Batch keys from Readers concurrent readers.
type read struct {
	Keys    []string
	Readers int
	Batch   int
	Seed    uint64
}

// readAll runs r against s and reports bytes read per second and p99 batch latency. Every key
// must be found whole.
func readAll(ctx context.Context, s source, r read) (Rate, error) {
	if r.Readers < 1 || r.Batch < 1 || len(r.Keys) == 0 {
		return Rate{}, fmt.Errorf("bench: a read needs readers and batch >= 1 and some keys, got %d, %d, %d keys", r.Readers, r.Batch, len(r.Keys))
	}
	keys := append([]string(nil), r.Keys...)
	rand.New(rand.NewPCG(r.Seed, 2)).Shuffle(len(keys), func(a, b int) { keys[a], keys[b] = keys[b], keys[a] })
	batches := (len(keys) + r.Batch - 1) / r.Batch
	total, el, lats, err := runBatches(ctx, r.Readers, batches, func(ctx context.Context, b int) (int64, error) {
		return s.get(ctx, keys[b*r.Batch:min((b+1)*r.Batch, len(keys))])
	})
	if err != nil {
		return Rate{}, err
	}
	return newRate(len(keys), total, el, lats), nil
}

// dropCaches writes dirty pages back and drops the clean page cache (needs root), so that a
// read run reads from the disk even where the store reads through the page cache.
func dropCaches() error {
	unix.Sync()
	err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1\n"), 0)
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("page cache not dropped (needs root): %w", err)
	}
	if err != nil {
		return fmt.Errorf("page cache not dropped: %w", err)
	}
	return nil
}
