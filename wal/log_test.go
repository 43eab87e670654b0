package wal

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none = valid
	}{
		{"default", DefaultConfig("/tmp/x"), nil},
		{"zero sizes mean default", Config{Dir: "d"}, nil},
		{"empty dir", Config{}, []string{"Dir is empty"}},
		{"every problem", Config{SegmentSize: -1, MaxBatchRecords: -2},
			[]string{"Dir is empty", "SegmentSize -1", "MaxBatchRecords -2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err != nil) != (len(tc.want) > 0) {
				t.Fatalf("Validate = %v, want errors %q", err, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Validate = %v, missing %q", err, w)
				}
			}
		})
	}
	if _, _, err := Open(Config{}); err == nil {
		t.Fatal("Open accepted an invalid config")
	}
}

func TestNewLogIsEmpty(t *testing.T) {
	l, rep := mustOpen(t, testConfig(t, t.TempDir()+"/new/wal"))
	if rep.Repaired || l.FirstIndex() != 1 || l.LastIndex() != 0 {
		t.Fatalf("new log: first %d last %d repair %+v", l.FirstIndex(), l.LastIndex(), rep)
	}
	if got := replayAll(t, l); len(got) != 0 {
		t.Fatalf("replayed %d records", len(got))
	}
	if first, err := l.Append(); first != 0 || err != nil {
		t.Fatalf("empty Append = %d, %v", first, err)
	}
	if _, err := l.Append(Record{Type: 9}); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("Append(bad) = %v, want ErrInvalidRecord", err)
	}
}

func TestTruncateFrontThenReopen(t *testing.T) {
	dir := t.TempDir()
	cfg, recs := rotatedLog(t, dir)
	l, _ := mustOpen(t, cfg)
	last := l.LastIndex()
	if err := l.TruncateFront(last + 1); err == nil || errors.Is(err, ErrFailed) {
		t.Fatalf("TruncateFront past the end = %v, want a plain error", err)
	}
	cases := []struct {
		name  string
		index uint64
		first uint64
	}{
		{"to the middle segment", 8, 8},
		{"backwards is a no-op", 3, 8},
		{"within the same segment", 9, 9},
		{"to the last entry", last, last},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := l.TruncateFront(tc.index); err != nil {
				t.Fatal(err)
			}
			if l.FirstIndex() != tc.first || l.LastIndex() != last {
				t.Fatalf("indexes [%d, %d], want [%d, %d]", l.FirstIndex(), l.LastIndex(), tc.first, last)
			}
			checkRecords(t, replayAll(t, l), recs[tc.first-1:])
		})
	}
	mustClose(t, l)
	l, rep := mustOpen(t, cfg)
	if rep.Repaired || l.FirstIndex() != last || l.LastIndex() != last {
		t.Fatalf("reopened: [%d, %d] %+v", l.FirstIndex(), l.LastIndex(), rep)
	}
	more := makeRecords("t", 10)
	appendEach(t, l, more)
	mustClose(t, l)
	l, _ = mustOpen(t, cfg)
	checkRecords(t, replayAll(t, l), append(append([]Record{}, recs[last-1:]...), more...))
}

// TestFailStop injects an error into one I/O step: that call and every later
// call must return ErrFailed wrapping the cause.
func TestFailStop(t *testing.T) {
	errInjected := errors.New("injected EIO")
	cases := []struct {
		name    string
		fp      string // the failpoint that fails once
		segSize int
		trigger func(l *Log) error
	}{
		{"batch write", failpoint.WALWriteBatch, 0, func(l *Log) error { _, err := l.Append(makeRecords("f", 1)...); return err }},
		{"async batch write", failpoint.WALWriteBatch, 0, func(l *Log) error { l.AppendAsync(makeRecords("f", 1)...); return l.Sync() }},
		{"directory fsync after rotation", failpoint.WALSyncDir, 64, func(l *Log) error { _, err := l.Append(makeRecords("f", 1)...); return err }},
		{"truncate front", failpoint.WALTruncateFront, 0, func(l *Log) error { return l.TruncateFront(2) }},
		{"directory fsync after truncate", failpoint.WALSyncDir, 0, func(l *Log) error { return l.TruncateFront(2) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			cfg.SegmentSize = tc.segSize
			l, _ := mustOpen(t, cfg)
			before := makeRecords("ok", 3)
			appendEach(t, l, before)
			var mu sync.Mutex
			armed := true
			armFailpoint(t, tc.fp, func() error {
				mu.Lock()
				defer mu.Unlock()
				if armed {
					armed = false
					return errInjected
				}
				return nil
			})
			err := tc.trigger(l)
			if !errors.Is(err, ErrFailed) || !errors.Is(err, errInjected) {
				t.Fatalf("failing call = %v, want ErrFailed wrapping the cause", err)
			}
			checkFailed(t, l)
			// Recovery sees everything acknowledged (and maybe the failed record).
			l2, _ := mustOpen(t, cfg)
			got, want := replayAll(t, l2), before[l2.FirstIndex()-1:]
			if len(got) < len(want) || len(got) > len(want)+1 {
				t.Fatalf("after reopen: %d records, want %d or one more", len(got), len(want))
			}
			checkRecords(t, got[:len(want)], want)
		})
	}
}

func checkFailed(t *testing.T, l *Log) {
	t.Helper()
	l.AppendAsync(makeRecords("late", 1)...) // must not block or panic
	_, errAppend := l.Append(makeRecords("late", 1)...)
	calls := map[string]error{
		"Append":        errAppend,
		"Sync":          l.Sync(),
		"TruncateFront": l.TruncateFront(2),
		"Replay":        l.Replay(func(uint64, Record) error { return nil }),
		"Close":         l.Close(),
		"second Close":  l.Close(),
	}
	for name, err := range calls {
		if !errors.Is(err, ErrFailed) {
			t.Errorf("%s after failure = %v, want ErrFailed", name, err)
		}
	}
}

func TestClosedLog(t *testing.T) {
	l, _ := mustOpen(t, testConfig(t, t.TempDir()))
	appendEach(t, l, makeRecords("c", 2))
	mustClose(t, l)
	l.AppendAsync(makeRecords("late", 1)...)
	_, errAppend := l.Append(makeRecords("late", 1)...)
	for name, err := range map[string]error{
		"Append":        errAppend,
		"Sync":          l.Sync(),
		"TruncateFront": l.TruncateFront(2),
		"Replay":        l.Replay(func(uint64, Record) error { return nil }),
		"Close":         l.Close(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if l.LastIndex() != 2 {
		t.Fatalf("LastIndex after Close = %d", l.LastIndex())
	}
}

func TestAppendAsyncRidesOnNextCommit(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.MaxBatchRecords = 4
	l, _ := mustOpen(t, cfg)
	recs := makeRecords("y", 9)

	l.AppendAsync(recs[0], recs[1])
	if l.LastIndex() != 0 || l.Stats().Batches != 0 || onDisk(t, dir) != 0 {
		t.Fatalf("AppendAsync committed on its own: last %d stats %+v", l.LastIndex(), l.Stats())
	}
	if first, err := l.Append(recs[2]); err != nil || first != 3 {
		t.Fatalf("Append = %d, %v; want 3", first, err)
	}
	if got, want := l.Stats(), (Stats{Appends: 2, Records: 3, Batches: 1}); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
	l.AppendAsync(recs[3])
	if err := l.Sync(); err != nil || l.LastIndex() != 4 || onDisk(t, dir) != 4 {
		t.Fatalf("Sync = %v, last %d, on disk %d; want 4", err, l.LastIndex(), onDisk(t, dir))
	}
	l.AppendAsync(recs[4:8]...) // MaxBatchRecords queued: commits on its own
	testkit.Eventually(t, 5*time.Second, "a full async queue to commit", func() bool { return l.LastIndex() == 8 })
	l.AppendAsync(recs[8])
	mustClose(t, l) // Close commits the rest
	l, _ = mustOpen(t, cfg)
	checkRecords(t, replayAll(t, l), recs)
}

// onDisk counts the valid entries in the segment files.
func onDisk(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, seg := range segmentPaths(t, dir) {
		n += scanEntries(readFile(t, seg.path)).count
	}
	return n
}

// TestGroupCommitSharesFsyncs holds the first batch write until every other
// Append is queued: they must all share one more batch (one fsync).
func TestGroupCommitSharesFsyncs(t *testing.T) {
	const n = 64
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	armFailpoint(t, failpoint.WALWriteBatch, func() error {
		once.Do(func() { close(entered); <-release })
		return nil
	})
	l, _ := mustOpen(t, testConfig(t, t.TempDir()))
	indexes := make(chan uint64, n)
	var wg sync.WaitGroup
	appendOne := func(i int) {
		defer wg.Done()
		first, err := l.Append(makeRecords(fmt.Sprint("g", i), 1)...)
		if err != nil {
			t.Error(err)
		}
		indexes <- first
	}
	wg.Add(n)
	go appendOne(0)
	<-entered
	for i := 1; i < n; i++ {
		go appendOne(i)
	}
	testkit.Eventually(t, 5*time.Second, "every Append to queue", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.queue) == n-1
	})
	close(release)
	wg.Wait()
	close(indexes)
	seen := map[uint64]bool{}
	for i := range indexes {
		if seen[i] || i < 1 || i > n {
			t.Fatalf("index %d duplicated or out of range", i)
		}
		seen[i] = true
	}
	if st := l.Stats(); st.Batches != 2 || st.Records != n || st.Appends != n {
		t.Fatalf("Stats = %+v, want 2 batches for %d appends", st, n)
	}
}
