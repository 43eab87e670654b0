package wal

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/vfs/errorfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// crashPoint is the filesystem a power loss just before one persistence step of the log
// could leave, with what the log had promised by then.
type crashPoint struct {
	op      errorfs.Op
	name    string
	fs      *memfs.FS
	acked   int      // appends that had returned: their records must survive
	pending []Record // the batch being committed: may survive, whole or as a prefix
	truncTo uint64   // the highest TruncateFront target asked for: entries from it on must survive
}

// TestCrashAtEveryPersistencePoint runs the log on memfs and takes, before every write,
// sync, directory sync, rename and removal it makes, the filesystem a power loss there
// could leave (memfs.Crash, the mode drawn from the seed). Each is then opened as a
// restart would: it must open without a CorruptError, hold every acknowledged record in
// order from its first index on, hold of the batch in flight at most a prefix, keep every
// entry from the highest truncation target on, and take and keep a new append.
func TestCrashAtEveryPersistencePoint(t *testing.T) {
	seed := testkit.Seed(t)
	rng := testkit.NewRand(seed)
	crashRng := testkit.NewRand(seed + 1) // used only under mu, by the injector
	mem := memfs.New()

	var (
		mu      sync.Mutex
		points  []crashPoint
		acked   atomic.Int64
		pending []Record // guarded by mu
		truncTo uint64   // guarded by mu
	)
	modes := []memfs.CrashMode{memfs.CrashDropAll, memfs.CrashPrefix, memfs.CrashTorn}
	inject := func(op errorfs.Op, name string) error {
		switch op {
		case errorfs.OpWrite, errorfs.OpSync, errorfs.OpSyncDir, errorfs.OpRename, errorfs.OpRemove:
		default:
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		points = append(points, crashPoint{
			op: op, name: name,
			fs:      mem.Crash(modes[crashRng.IntN(len(modes))], crashRng),
			acked:   int(acked.Load()),
			pending: pending,
			truncTo: truncTo,
		})
		return nil
	}

	cfg := Config{Dir: "/wal", FS: errorfs.Wrap(mem, inject), SegmentSize: 2048}
	l, _, err := Open(cfg)
	testkit.Must(t, err, "Open")
	var records []Record // records[i] is at index i+1
	for step := 0; step < 160; step++ {
		if step%40 == 39 && len(records) > 4 {
			to := uint64(1 + rng.IntN(len(records)))
			mu.Lock()
			truncTo = max(truncTo, to)
			mu.Unlock()
			testkit.Must(t, l.TruncateFront(to), "TruncateFront(%d)", to)
			continue
		}
		batch := makeRecords(fmt.Sprintf("s%d", step), 1+rng.IntN(4))
		for i := range batch {
			batch[i].Payload = append(batch[i].Payload, bytes.Repeat([]byte{byte(step)}, rng.IntN(300))...)
		}
		mu.Lock()
		pending = batch
		mu.Unlock()
		first, err := l.Append(batch...)
		testkit.Must(t, err, "Append at step %d", step)
		if first != uint64(len(records)+1) {
			t.Fatalf("step %d: Append gave index %d, want %d", step, first, len(records)+1)
		}
		records = append(records, batch...)
		acked.Store(int64(len(records)))
		mu.Lock()
		pending = nil
		mu.Unlock()
	}
	testkit.Must(t, l.Close(), "Close")

	kinds := map[string]int{}
	for i, p := range points {
		kinds[p.op.String()]++
		if err := checkCrashPoint(p, records); err != nil {
			t.Errorf("crash point %d (before %s of %s; %d acked, %d in flight, truncated to %d): %v",
				i, p.op, p.name, p.acked, len(p.pending), p.truncTo, err)
		}
	}
	t.Logf("%d crash recoveries (seed %d): before %v", len(points), seed, kinds)
	if len(points) < 300 {
		t.Fatalf("only %d crash points: the log no longer runs on the vfs seam?", len(points))
	}
}

// checkCrashPoint opens the log p left and checks it against what was promised.
func checkCrashPoint(p crashPoint, records []Record) error {
	l, _, err := Open(Config{Dir: "/wal", FS: p.fs, SegmentSize: 2048})
	if err != nil {
		return fmt.Errorf("open after crash: %w", err)
	}
	defer l.Close()
	first, last := l.FirstIndex(), l.LastIndex()
	if p.acked > 0 && first > max(p.truncTo, 1) {
		return fmt.Errorf("first index %d: entries from the truncation target %d on were lost", first, p.truncTo)
	}
	if last < uint64(p.acked) || last > uint64(p.acked+len(p.pending)) {
		return fmt.Errorf("last index %d, want %d acked (+ up to %d in flight)", last, p.acked, len(p.pending))
	}
	err = l.Replay(func(index uint64, rec Record) error {
		want := records[index-1]
		if index > uint64(p.acked) {
			want = p.pending[index-uint64(p.acked)-1]
		}
		if rec.Type != want.Type || rec.TxnID != want.TxnID || !bytes.Equal(rec.Payload, want.Payload) {
			return fmt.Errorf("entry %d is %v %x (%d bytes), want %v %x (%d bytes)",
				index, rec.Type, rec.TxnID, len(rec.Payload), want.Type, want.TxnID, len(want.Payload))
		}
		return nil
	})
	if err != nil {
		return err
	}
	extra := Record{Type: RecordDone, Payload: []byte("after the crash")}
	at, err := l.Append(extra)
	if err != nil || at != last+1 {
		return fmt.Errorf("append after recovery: index %d, %v (want %d)", at, err, last+1)
	}
	return nil
}

// TestOversizedSegmentRefused: a segment file grown far past anything the log writes (by
// damage) is refused as corrupt at Open, without reading it into memory.
func TestOversizedSegmentRefused(t *testing.T) {
	mem := memfs.New()
	l, _, err := Open(Config{Dir: "/wal", FS: mem})
	testkit.Must(t, err, "Open")
	_, err = l.Append(makeRecords("big", 3)...)
	testkit.Must(t, err, "Append")
	testkit.Must(t, l.Close(), "Close")
	f, err := mem.OpenFile("/wal/00000000000000000001", os.O_RDWR, 0)
	testkit.Must(t, err, "open the segment")
	testkit.Must(t, f.Truncate(3<<30), "grow the segment to 3 GiB")
	testkit.Must(t, f.Close(), "close the segment")
	_, _, err = Open(Config{Dir: "/wal", FS: mem})
	if !IsCorrupt(err) || !strings.Contains(err.Error(), "larger than any segment") {
		t.Fatalf("Open with a 3 GiB segment: %v, want a CorruptError naming its size", err)
	}
}
