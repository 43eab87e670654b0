package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// tornCase damages a single-segment log holding recs; survive is how many
// records must remain.
type tornCase struct {
	name    string
	damage  func([]byte) []byte
	survive int
	dropped int // expected RepairReport.DroppedEntries; -1 = at least 1; 0 = no repair
}

func tornCases(t *testing.T, recs []Record) []tornCase {
	ends := entryEnds(recs)
	size := ends[len(ends)-1]
	survivors := func(n int) int {
		k := 0
		for k < len(ends) && ends[k] <= n {
			k++
		}
		return k
	}
	var cases []tornCase
	// Cut 1..N bytes: across the last two entries, and the whole file.
	for cut := 1; cut <= size-ends[len(ends)-3]+1; cut++ {
		k, dropped := survivors(size-cut), 1
		if ends[k-1] == size-cut {
			dropped = 0 // cut at an entry boundary: a shorter but valid log
		}
		cases = append(cases, tornCase{fmt.Sprintf("cut %d bytes", cut),
			func(b []byte) []byte { return b[:len(b)-cut] }, k, dropped})
	}
	cases = append(cases, tornCase{"cut everything", func(b []byte) []byte { return b[:0] }, 0, 0})
	for _, n := range []int{1, 2, 3, 33, 512, 4095, 4096} {
		cases = append(cases, tornCase{fmt.Sprintf("append %d zeros", n),
			func(b []byte) []byte { return append(b, make([]byte, n)...) }, len(recs), n})
	}
	cases = append(cases, tornCase{"cut 3 bytes then 512 zeros",
		func(b []byte) []byte { return append(b[:len(b)-3], make([]byte, 512)...) }, len(recs) - 1, -1})
	rng := testkit.Rand(t)
	for i := range 8 {
		garbage := make([]byte, 1+rng.IntN(4096))
		for j := range garbage {
			garbage[j] = byte(rng.Uint32())
		}
		cases = append(cases, tornCase{fmt.Sprintf("append %d garbage bytes #%d", len(garbage), i),
			func(b []byte) []byte { return append(b, garbage...) }, len(recs), -1})
	}
	return cases
}

func TestOpenRepairsTornTail(t *testing.T) {
	recs := makeRecords("a", 6)
	ends := entryEnds(recs)
	for _, tc := range tornCases(t, recs) {
		t.Run(tc.name, func(t *testing.T) {
			cfg, path := singleSegmentLog(t, recs)
			writeFile(t, path, tc.damage(readFile(t, path)))

			l, rep := mustOpen(t, cfg)
			checkRepair(t, rep, path, ends, tc)
			checkRecords(t, replayAll(t, l), recs[:tc.survive])
			if got := l.LastIndex(); got != uint64(tc.survive) {
				t.Fatalf("LastIndex = %d, want %d", got, tc.survive)
			}
			more := makeRecords("b", 3)
			appendEach(t, l, more)
			mustClose(t, l)

			l, rep = mustOpen(t, cfg)
			if rep.Repaired {
				t.Fatalf("second Open repaired again: %+v", rep)
			}
			want := append(append([]Record{}, recs[:tc.survive]...), more...)
			checkRecords(t, replayAll(t, l), want)
		})
	}
}

// singleSegmentLog writes recs one batch each to a new log and closes it. It
// returns the config and the path of the only segment.
func singleSegmentLog(t *testing.T, recs []Record) (Config, string) {
	t.Helper()
	cfg := testConfig(t, t.TempDir())
	l, _ := mustOpen(t, cfg)
	appendEach(t, l, recs)
	mustClose(t, l)
	segs := segmentPaths(t, cfg.Dir)
	if len(segs) != 1 {
		t.Fatalf("%d segments, want 1", len(segs))
	}
	return cfg, segs[0].path
}

func checkRepair(t *testing.T, rep RepairReport, path string, ends []int, tc tornCase) {
	t.Helper()
	wantOff := 0
	if tc.survive > 0 {
		wantOff = ends[tc.survive-1]
	}
	if rep.Repaired != (tc.dropped != 0) {
		t.Fatalf("Repaired = %v, want %v (%+v)", rep.Repaired, tc.dropped != 0, rep)
	}
	if !rep.Repaired {
		return
	}
	if rep.File != path || rep.Offset != int64(wantOff) {
		t.Fatalf("repair at %s:%d, want %s:%d", rep.File, rep.Offset, path, wantOff)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != int64(wantOff) {
		t.Fatalf("segment after repair: %v, %v; want size %d", fi, err, wantOff)
	}
	if (tc.dropped == -1 && rep.DroppedEntries < 1) || (tc.dropped > 0 && rep.DroppedEntries != tc.dropped) {
		t.Fatalf("DroppedEntries = %d, want %d", rep.DroppedEntries, tc.dropped)
	}
	if rep.TruncatedBytes <= 0 {
		t.Fatalf("TruncatedBytes = %d", rep.TruncatedBytes)
	}
}

// TestOpenRefusesMidLogCorruption flips one bit in each field of a middle
// entry: Open must name the file and offset and change nothing.
func TestOpenRefusesMidLogCorruption(t *testing.T) {
	recs := makeRecords("c", 5)
	ends := entryEnds(recs)
	start := ends[0] // entry index 2 (0-based 1)
	cases := []struct {
		name string
		at   int // offset within entry 2, counting its 1-byte length prefix
		bit  byte
	}{
		{"length prefix low bit", 0, 0x01},
		{"length prefix high bit", 0, 0x80},
		{"magic", 1, 0x02},
		{"version", 1 + offVersion, 0x01},
		{"type", 1 + offType, 0x04},
		{"txnID", 1 + offTxnID + 3, 0x10},
		{"payload length", 1 + offPayloadLen, 0x01},
		{"payload", 1 + envHeaderSize + 2, 0x20},
		{"checksum", ends[1] - start - 1, 0x40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, path := singleSegmentLog(t, recs)
			data := readFile(t, path)
			data[start+tc.at] ^= tc.bit
			writeFile(t, path, data)

			_, _, err := Open(cfg)
			checkCorrupt(t, err, path, int64(start), 2)
			if !bytes.Equal(readFile(t, path), data) {
				t.Fatal("Open changed a corrupt log")
			}
		})
	}
}

func checkCorrupt(t *testing.T, err error, file string, off int64, index uint64) {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || !IsCorrupt(err) {
		t.Fatalf("err = %v, want a *CorruptError", err)
	}
	if ce.File != file || ce.Offset != off || ce.Index != index {
		t.Fatalf("corruption reported at %s:%d index %d, want %s:%d index %d (%v)",
			ce.File, ce.Offset, ce.Index, file, off, index, err)
	}
	t.Logf("reported: %v", err)
}

// rotatedLog writes records with a small SegmentSize until there are at least
// three segments and the last one is not empty.
func rotatedLog(t *testing.T, dir string) (Config, []Record) {
	t.Helper()
	cfg := testConfig(t, dir)
	cfg.SegmentSize = 200
	l, _ := mustOpen(t, cfg)
	var recs []Record
	for i := 0; ; i++ {
		rec := makeRecords(fmt.Sprint("r", i), 1)[0]
		appendEach(t, l, []Record{rec})
		recs = append(recs, rec)
		segs := segmentPaths(t, dir)
		if len(segs) >= 3 && len(readFile(t, segs[len(segs)-1].path)) > 0 {
			break
		}
	}
	mustClose(t, l)
	return cfg, recs
}

func TestRotatedLogRepair(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, segs []segment) // segs in index order
		// survive is how many records remain, given the segments.
		survive func(segs []segment, total int) int
		// corrupt, if set, is the segment (index into segs) Open must name.
		corrupt int
	}{
		{"cut last byte", func(t *testing.T, segs []segment) {
			p := segs[len(segs)-1].path
			writeFile(t, p, readFile(t, p)[:len(readFile(t, p))-1])
		}, func(segs []segment, total int) int { return total - 1 }, -1},
		{"emptied last segment (a valid empty tail)", func(t *testing.T, segs []segment) {
			writeFile(t, segs[len(segs)-1].path, nil)
		}, func(segs []segment, total int) int { return int(segs[len(segs)-1].index) - 1 }, -1},
		{"zeroed last segment is removed", func(t *testing.T, segs []segment) {
			p := segs[len(segs)-1].path
			writeFile(t, p, make([]byte, len(readFile(t, p))))
		}, func(segs []segment, total int) int { return int(segs[len(segs)-1].index) - 1 }, -1},
		{"zeros after last segment", func(t *testing.T, segs []segment) {
			p := segs[len(segs)-1].path
			writeFile(t, p, append(readFile(t, p), make([]byte, 4096)...))
		}, func(segs []segment, total int) int { return total }, -1},
		{"bit flip in first segment", func(t *testing.T, segs []segment) {
			data := readFile(t, segs[0].path)
			data[len(data)-3] ^= 1 // checksum of its last entry
			writeFile(t, segs[0].path, data)
		}, nil, 0},
		{"torn end of middle segment", func(t *testing.T, segs []segment) {
			data := readFile(t, segs[1].path)
			writeFile(t, segs[1].path, data[:len(data)-1])
		}, nil, 1},
		{"missing middle segment", func(t *testing.T, segs []segment) {
			if err := os.Remove(segs[1].path); err != nil {
				t.Fatal(err)
			}
		}, nil, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg, recs := rotatedLog(t, dir)
			segs := segmentPaths(t, dir)
			tc.damage(t, segs)
			if tc.survive == nil {
				_, _, err := Open(cfg)
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.File != segs[tc.corrupt].path {
					t.Fatalf("Open = %v, want a *CorruptError naming %s", err, segs[tc.corrupt].path)
				}
				t.Logf("reported: %v", err)
				return
			}
			survive := tc.survive(segs, len(recs))
			l, rep := mustOpen(t, cfg)
			t.Logf("repair: %+v", rep)
			checkRecords(t, replayAll(t, l), recs[:survive])
			more := makeRecords("m", 12)
			appendEach(t, l, more)
			mustClose(t, l)
			l, _ = mustOpen(t, cfg)
			checkRecords(t, replayAll(t, l), append(append([]Record{}, recs[:survive]...), more...))
		})
	}
}

// TestOpenFinishesInterruptedTruncation fakes a crash inside tidwall's
// TruncateFront: the .START copy is in place and the first segment already
// removed, the second not yet.
func TestOpenFinishesInterruptedTruncation(t *testing.T) {
	dir := t.TempDir()
	cfg, recs := rotatedLog(t, dir)
	segs := segmentPaths(t, dir)
	second := readFile(t, segs[1].path)
	ends := entryEnds(recs[segs[1].index-1 : segs[2].index-1])
	keep := segs[1].index + 1 // drop the first entry of the second segment too
	start := filepath.Join(dir, fmt.Sprintf("%020d.START", keep))
	writeFile(t, start, second[ends[0]:])
	if err := os.Remove(segs[0].path); err != nil {
		t.Fatal(err)
	}
	l, _ := mustOpen(t, cfg)
	if l.FirstIndex() != keep {
		t.Fatalf("FirstIndex = %d, want %d", l.FirstIndex(), keep)
	}
	checkRecords(t, replayAll(t, l), recs[keep-1:])
	if _, err := os.Stat(start); !os.IsNotExist(err) {
		t.Fatalf(".START file still there: %v", err)
	}
}
