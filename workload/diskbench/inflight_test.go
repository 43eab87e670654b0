package diskbench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRunPatterns runs each pattern on a few MiB and checks the counts it reports.
func TestRunPatterns(t *testing.T) {
	const seed = 7
	t.Logf("seed %d", seed)
	dir := t.TempDir()
	for _, j := range []Job{
		{Pattern: SeqWritePattern, Block: 1 << 20, Depth: 8, FileSize: 8 << 20, EndSync: true},
		{Pattern: SeqWritePattern, Block: 256 << 10, Depth: 4, FileSize: 9 << 20, Batch: 5},
		{Pattern: RandReadPattern, Block: 256 << 10, Depth: 32, FileSize: 8 << 20, Ops: 64},
		{Pattern: RandWritePattern, Block: 4096, Depth: 32, FileSize: 4 << 20, Ops: 1024, SyncEvery: 256, EndSync: true},
	} {
		j.Dir, j.Seed = dir, seed
		r, err := Run(context.Background(), j)
		if err != nil {
			t.Fatalf("%s: %v", j.Pattern, err)
		}
		want := j.Ops
		if want == 0 {
			want = j.FileSize / int64(j.Block)
		}
		if r.Ops != want || r.Bytes != want*int64(j.Block) || r.MBPerSec <= 0 || r.IOPS <= 0 {
			t.Errorf("%s: %+v, want %d ops", j.Pattern, r, want)
		}
		t.Logf("%s: %.0f MB/s, %.0f IOPS, direct %v", j.Pattern, r.MBPerSec, r.IOPS, r.Direct)
	}
	if _, err := Run(context.Background(), Job{Dir: dir, Pattern: RandReadPattern, Block: 1000, Depth: 1, FileSize: 1 << 20, Ops: 1}); err == nil {
		t.Error("a 1000-byte block was accepted")
	}
}

// TestSeqBatchesWritesEveryBlock runs the batched sequential write on a file of 36 blocks in
// runs of 5 (the last run short) and checks that every block holds one writer's pattern and
// that nothing was written past the last block.
func TestSeqBatchesWritesEveryBlock(t *testing.T) {
	const block, blocks = 256 << 10, 36
	path := filepath.Join(t.TempDir(), "f")
	f, direct, err := openDirect(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	j := Job{Pattern: SeqWritePattern, Block: block, Depth: 4, FileSize: blocks * block, Batch: 5}
	r, err := seqBatches(context.Background(), j, f, blocks, direct)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ops != blocks || r.P99 <= 0 {
		t.Errorf("%d ops, p99 %v; want %d ops and a latency", r.Ops, r.P99, blocks)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != blocks*block {
		t.Fatalf("file is %d bytes, want %d", len(got), blocks*block)
	}
	for b := range blocks {
		p := got[b*block : (b+1)*block]
		g := int(p[0]) - 1 // the writer: byte i of its buffer is i*7+g+1
		for i := range p {
			if g < 0 || g >= j.Depth || p[i] != byte(i*7+g+1) {
				t.Fatalf("block %d byte %d is %d: not a writer's pattern", b, i, p[i])
			}
		}
	}
}

// Run stops when its context ends: before it starts (every pattern) and in the middle of a
// sequential write far longer than the deadline (storenode replay's Ctrl-C during its disk
// line). Either way it returns the context's error, not a figure.
func TestRunStopsWhenContextEnds(t *testing.T) {
	dir := t.TempDir()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, j := range []Job{
		{Dir: dir, Pattern: SeqWritePattern, Block: 1 << 20, Depth: 1, FileSize: 4 << 20, EndSync: true},
		{Dir: dir, Pattern: SeqWritePattern, Block: 1 << 20, Depth: 2, FileSize: 4 << 20, Batch: 2},
		{Dir: dir, Pattern: RandReadPattern, Block: 4096, Depth: 4, FileSize: 1 << 20, Ops: 16},
		{Dir: dir, Pattern: RandWritePattern, Block: 4096, Depth: 4, FileSize: 1 << 20, Ops: 16},
	} {
		if _, err := Run(done, j); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with an ended context: %v, want context.Canceled", j.Pattern, err)
		}
	}
	ctx, stop := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer stop()
	start := time.Now()
	_, err := SeqWriteLimit(ctx, dir, 1<<30, []int{1, 8})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("1 GiB limit with a 20 ms deadline: %v after %v, want context.DeadlineExceeded", err, time.Since(start))
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("stopped after %v; want within a few writes of the deadline", el)
	}
}
