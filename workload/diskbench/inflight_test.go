package diskbench

import "testing"

// TestRunPatterns runs each pattern on a few MiB and checks the counts it reports.
func TestRunPatterns(t *testing.T) {
	const seed = 7
	t.Logf("seed %d", seed)
	dir := t.TempDir()
	for _, j := range []Job{
		{Pattern: SeqWritePattern, Block: 1 << 20, Depth: 8, FileSize: 8 << 20, EndSync: true},
		{Pattern: RandReadPattern, Block: 256 << 10, Depth: 32, FileSize: 8 << 20, Ops: 64},
		{Pattern: RandWritePattern, Block: 4096, Depth: 32, FileSize: 4 << 20, Ops: 1024, SyncEvery: 256, EndSync: true},
	} {
		j.Dir, j.Seed = dir, seed
		r, err := Run(j)
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
	if _, err := Run(Job{Dir: dir, Pattern: RandReadPattern, Block: 1000, Depth: 1, FileSize: 1 << 20, Ops: 1}); err == nil {
		t.Error("a 1000-byte block was accepted")
	}
}
