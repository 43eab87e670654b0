package wal

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// TestConcurrentUse runs Append, AppendAsync, Sync, TruncateFront and the
// getters from many goroutines (run it with -race), then checks that every
// record is in the log exactly once and every Append's index is right.
func TestConcurrentUse(t *testing.T) {
	rng := testkit.Rand(t)
	const workers, ops = 8, 60
	seeds := make([]uint64, workers)
	for i := range seeds {
		seeds[i] = rng.Uint64()
	}
	cfg := testConfig(t, t.TempDir())
	cfg.SegmentSize = 2048
	cfg.MaxBatchRecords = 16
	l, _ := mustOpen(t, cfg)

	var mu sync.Mutex
	acked := map[string]uint64{} // payload -> index returned by Append
	written := map[string]bool{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := testkit.NewRand(seeds[w])
			for op := range ops {
				recs := []Record{{Type: RecordIntent, Payload: []byte(fmt.Sprintf("w%d-op%d", w, op))}}
				mu.Lock()
				written[string(recs[0].Payload)] = true
				mu.Unlock()
				switch r.IntN(10) {
				case 0, 1, 2:
					l.AppendAsync(recs...)
				case 3:
					if err := l.Sync(); err != nil {
						t.Error(err)
					}
				case 4:
					if last := l.LastIndex(); last > 20 {
						if err := l.TruncateFront(last - 20); err != nil {
							t.Error(err)
						}
					}
					l.AppendAsync(recs...)
				default:
					first, err := l.Append(recs...)
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					acked[string(recs[0].Payload)] = first
					mu.Unlock()
				}
				_ = l.Stats()
				if l.FirstIndex() > l.LastIndex()+1 {
					t.Error("FirstIndex beyond LastIndex+1")
				}
			}
		}()
	}
	wg.Wait()
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	first := l.FirstIndex()
	checkConcurrentLog(t, l, first, acked, written)
	mustClose(t, l)
	l, _ = mustOpen(t, cfg)
	checkConcurrentLog(t, l, first, acked, written)
	if st := l.Stats(); st != (Stats{}) {
		t.Fatalf("Stats after reopen = %+v, want zero", st)
	}
}

func checkConcurrentLog(t *testing.T, l *Log, first uint64, acked map[string]uint64, written map[string]bool) {
	t.Helper()
	seen := map[string]bool{}
	err := l.Replay(func(index uint64, rec Record) error {
		p := string(rec.Payload)
		if seen[p] || !written[p] {
			return fmt.Errorf("index %d: unexpected or duplicate record %q", index, p)
		}
		seen[p] = true
		if want, ok := acked[p]; ok && want != index {
			return fmt.Errorf("record %q at index %d, Append said %d", p, index, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, index := range acked {
		if index >= first && !seen[p] {
			t.Fatalf("acknowledged record %q (index %d) is missing", p, index)
		}
	}
	if want := int(l.LastIndex() - l.FirstIndex() + 1); len(seen) != want {
		t.Fatalf("replayed %d records, want %d", len(seen), want)
	}
}

// TestReplayReportsLaterDamage damages an older segment after Open (tidwall
// reads older segments lazily): Replay must name the file, offset and index.
func TestReplayReportsLaterDamage(t *testing.T) {
	dir := t.TempDir()
	cfg, recs := rotatedLog(t, dir)
	l, _ := mustOpen(t, cfg)
	seg := segmentPaths(t, dir)[0]
	ends := entryEnds(recs[:5])
	data := readFile(t, seg.path)
	data[ends[2]+1+envHeaderSize] ^= 1 // payload of entry index 4
	if err := os.WriteFile(seg.path, data, 0o640); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := l.Replay(func(uint64, Record) error { n++; return nil })
	checkCorrupt(t, err, seg.path, int64(ends[2]), 4)
	if n != 3 {
		t.Fatalf("fn saw %d records before the damage, want 3", n)
	}
	stop := errors.New("stop")
	if err := l.Replay(func(uint64, Record) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("Replay = %v, want fn's error", err)
	}
}
