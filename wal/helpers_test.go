package wal

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/internal/failpoint"
)

var (
	updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata/")
	seedFlag     = flag.Uint64("seed", 0, "seed for randomized tests (0 = from the clock)")
)

// testRand returns a generator seeded from -seed or the clock, and logs the seed.
func testRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
	return newRand(seed)
}

func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// testConfig returns a Config for dir that logs to the test output.
func testConfig(t *testing.T, dir string) Config {
	t.Helper()
	cfg := DefaultConfig(dir)
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	return cfg
}

// mustOpen opens cfg and closes the Log when the test ends.
func mustOpen(t *testing.T, cfg Config) (*Log, RepairReport) {
	t.Helper()
	l, rep, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", cfg.Dir, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, rep
}

// mustClose closes l and fails the test on error.
func mustClose(t *testing.T, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// armFailpoint arms the failpoint name (one of failpoint.WALIO) to call fn on every hit,
// for the rest of the test; fn's error is used as that I/O step's error. It works in normal
// builds (failpoint.EnableFunc).
func armFailpoint(t *testing.T, name string, fn func() error) {
	t.Helper()
	failpoint.EnableFunc(name, 0, fn)
	t.Cleanup(func() { failpoint.Disable(name) })
}

// makeRecords returns n distinct records, tagged by tag, of varying sizes.
func makeRecords(tag string, n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Type: RecordIntent, Payload: []byte(fmt.Sprintf("%s-%d-%s", tag, i, bytes.Repeat([]byte{'x'}, i%7)))}
		if i%3 == 2 {
			recs[i] = Record{Type: RecordDone}
		}
		recs[i].TxnID[0], recs[i].TxnID[15] = byte(i), tag[0]
	}
	return recs
}

// appendEach appends recs one call at a time (one batch each) and checks the
// returned indexes continue from LastIndex.
func appendEach(t *testing.T, l *Log, recs []Record) {
	t.Helper()
	for _, rec := range recs {
		want := l.LastIndex() + 1
		got, err := l.Append(rec)
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		if got != want {
			t.Fatalf("Append returned index %d, want %d", got, want)
		}
	}
}

// entryEnds returns the end offset of each of recs in a segment holding
// exactly them.
func entryEnds(recs []Record) []int {
	ends := make([]int, len(recs))
	off := 0
	for i, rec := range recs {
		env, _ := encodeRecord(rec)
		off += uvarintLen(len(env)) + len(env)
		ends[i] = off
	}
	return ends
}

// replayAll returns every record of l in order, checking the indexes.
func replayAll(t *testing.T, l *Log) []Record {
	t.Helper()
	var got []Record
	next := l.FirstIndex()
	err := l.Replay(func(index uint64, rec Record) error {
		if index != next {
			return fmt.Errorf("replay index %d, want %d", index, next)
		}
		next++
		got = append(got, rec)
		return nil
	})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return got
}

// checkRecords fails the test unless got and want hold equal records.
func checkRecords(t *testing.T, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if !sameRecord(got[i], want[i]) {
			t.Fatalf("record %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func sameRecord(a, b Record) bool {
	return a.Type == b.Type && a.TxnID == b.TxnID && bytes.Equal(a.Payload, b.Payload)
}

// segmentPaths returns the segment files of dir in index order.
func segmentPaths(t *testing.T, dir string) []segment {
	t.Helper()
	segs, _, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

// poll waits up to 5s for cond.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
