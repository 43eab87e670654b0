package wal

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"testing"

	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/vfs"
)

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
	testkit.Must(t, err, "Open(%s)", cfg.Dir)
	t.Cleanup(func() { _ = l.Close() }) // a failed log's Close returns its failure: tests check that themselves
	return l, rep
}

// mustClose closes l and fails the test on error.
func mustClose(t *testing.T, l *Log) {
	t.Helper()
	testkit.Must(t, l.Close(), "Close")
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
	segs, _, err := disk{fs: vfs.OSFS{}}.listSegments(dir)
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
