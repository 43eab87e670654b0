//go:build chaos

package chaos

import (
	"bytes"
	"context"
	varint "encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/nodehook"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/node"
	"github.com/kvoffload/kvoffload/vfs"
	"github.com/kvoffload/kvoffload/wal"
)

// The corruption-between-runs tier (L4; docs/chaos.md, TestCorruptionBetweenRuns): a child is SIGKILLed at a
// seeded write-path step, its files are damaged while it is down, and the next start-up must
// either repair the damage and pass the checkers, or refuse with a report naming it. Damage
// to the WAL tail (cut, zeros, garbage, a deleted or emptied newest segment) is a torn tail:
// repaired, and every acknowledged key survives (their metadata lives in Raft). A bit flip in
// the middle of the WAL is refused with a *wal.CorruptError naming the segment file and the
// offset of the damaged entry, and the files are left as they were; cutting the segment at
// that offset must then be a repair that loses no acknowledged key. A bit flip in a bucket
// record makes that key read Corrupt once and NotFound afterwards, never wrong bytes; other
// keys are unaffected. After a repair, a clean child run on the same directory must work.

// corruption is what a mutation expects of the next start-up.
type corruption struct {
	what string
	// refuse, when set, is the *wal.CorruptError start-up must return (File and Offset);
	// maybeRefuse allows it without requiring it (a flip in the last entry may be taken
	// for a torn tail and repaired).
	refuse      *wal.CorruptError
	maybeRefuse bool
	lost        []string // acknowledged keys whose records were damaged
}

type mutation struct {
	name  string
	apply func(t *testing.T, h *harness, rng *rand.Rand) corruption
	// minHit is the smallest hit of the kill failpoint; the kill falls on a hit in
	// [max(2, minHit), minHit+3]. Each write-path step is hit once per batch, and each of
	// the childWriters (4) writers runs its batches one after another, so of the N hits at
	// most four belong to batches that have not returned: the other N-4 or more batches
	// have finished, their INTENTs durable and their keys in the ack file.
	//
	// 5 guarantees acknowledged keys (five hits among four writers: one writer's first
	// batch has returned).
	//
	// walMinHit guarantees the WAL two entries at every step. They are INTENTs: a DONE is
	// queued with AppendAsync (txn/resolve.go) and reaches disk only with a later Append,
	// which need not come before the kill. From S1 on the N hits are N durable INTENTs
	// (Append returns after the fsync), but at S0 (txn.validated, before the INTENT is
	// logged) only the N-4 finished batches count. The first run's WAL is one segment
	// (64 MiB segments, no truncation below 4096 entries), so the newest segment has them.
	minHit int
}

// walMinHit is minHit for the WAL mutations: its hit of S0 comes after two or more batches
// have finished, so at least two INTENTs are in the WAL (see minHit).
const walMinHit = childWriters + 2

var mutations = []mutation{
	{name: "wal-cut-tail", apply: cutWALTail, minHit: walMinHit},
	{name: "wal-append-zeros", apply: func(t *testing.T, h *harness, rng *rand.Rand) corruption {
		return appendWAL(t, h, make([]byte, 1+rng.IntN(8192)), "zeros")
	}, minHit: walMinHit},
	{name: "wal-append-garbage", apply: func(t *testing.T, h *harness, rng *rand.Rand) corruption {
		junk := make([]byte, 1+rng.IntN(8192))
		for i := range junk {
			junk[i] = byte(rng.Uint32())
		}
		return appendWAL(t, h, junk, "garbage")
	}, minHit: walMinHit},
	{name: "wal-flip-middle", apply: flipWALMiddle, minHit: walMinHit},
	{name: "wal-delete-newest", apply: func(t *testing.T, h *harness, _ *rand.Rand) corruption {
		seg := newestSegment(t, h)
		if err := os.Remove(seg); err != nil {
			t.Fatal(err)
		}
		return corruption{what: "deleted " + filepath.Base(seg)}
	}, minHit: walMinHit},
	{name: "wal-empty-newest", apply: func(t *testing.T, h *harness, _ *rand.Rand) corruption {
		seg := newestSegment(t, h)
		if err := os.Truncate(seg, 0); err != nil {
			t.Fatal(err)
		}
		return corruption{what: "emptied " + filepath.Base(seg)}
	}, minHit: walMinHit},
	{name: "bucket-flip", apply: flipBucketRecords, minHit: 5},
}

// corruptSeeds is how many seeded runs each mutation gets.
const corruptSeeds = 2

// TestCorruptionBetweenRuns is the L4 tier: see the comment at the top of this file.
func TestCorruptionBetweenRuns(t *testing.T) {
	seed := testkit.Seed(t)
	t.Cleanup(failpoint.Reset) // in-process hits must not shift the @N of later tiers
	for mi, m := range mutations {
		for s := range corruptSeeds {
			t.Run(fmt.Sprintf("%s/%d", m.name, s), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, uint64(mi*corruptSeeds+s)))
				h := newHarness(t, seed)
				fp := failpoint.WritePath[rng.IntN(len(failpoint.WritePath))]
				spec := fmt.Sprintf("%s=crash@%d", fp, max(2, m.minHit)+rng.IntN(4))
				if !h.wait(h.start(spec, 4)) {
					t.Fatalf("the child was not killed at %s", spec)
				}
				c := m.apply(t, h, rng)
				t.Logf("killed at %s; %s", spec, c.what)
				if ce := recoverCorrupted(t, h, c); ce != nil {
					// The report must be actionable: cutting the segment where it points is
					// a repair that loses no acknowledged key (their metadata is in Raft).
					if err := os.Truncate(ce.File, ce.Offset); err != nil {
						t.Fatal(err)
					}
					recoverCorrupted(t, h, corruption{what: fmt.Sprintf("a cut at the reported offset %d", ce.Offset)})
				}
				if h.wait(h.start("", 1)) {
					t.Fatal("the clean run after the repair was killed")
				}
				h.verify()
			})
		}
	}
}

// recoverCorrupted starts the node on the damaged directory and checks the outcome c
// expects. It returns the start-up's refusal, if it refused as expected, else nil.
func recoverCorrupted(t *testing.T, h *harness, c corruption) *wal.CorruptError {
	t.Helper()
	before := walFiles(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Open(ctx, childConfig(h.dir))
	var ce *wal.CorruptError
	switch {
	case err != nil && c.refuse != nil && errors.As(err, &ce):
		if ce.File != c.refuse.File || ce.Offset != c.refuse.Offset {
			t.Fatalf("start-up refused with %v, want the damage reported in %s at offset %d", err, c.refuse.File, c.refuse.Offset)
		}
		if after := walFiles(t, h); !maps.Equal(before, after) {
			t.Fatal("a refused start-up changed the WAL files")
		}
		t.Logf("refused as expected: %v", err)
		totals.checks += 2
		return ce
	case err != nil:
		t.Fatalf("recovery after %s failed: %v", c.what, err)
	case c.refuse != nil && !c.maybeRefuse:
		n.Close()
		t.Fatalf("start-up accepted %s; want a wal.CorruptError for %s at offset %d", c.what, c.refuse.File, c.refuse.Offset)
	}
	totals.recoveries++
	repair := nodehook.Of(n).Repair
	t.Logf("recovered; WAL repair: %+v", repair)
	if err := checkLost(ctx, n, h, c.lost); err != nil {
		n.Close()
		t.Fatal(err)
	}
	acked := h.acked()
	rep, cerr := CheckNode(ctx, n, Workload{Seed: h.seed, BlockSize: childBlock}, acked)
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if cerr != nil {
		t.Fatalf("invariant violated after recovery from %s: %v", c.what, cerr)
	}
	if open, err := UnresolvedIntents(filepath.Join(h.dir, "wal")); err != nil || open != 0 {
		t.Fatalf("I5: %d unresolved intents after recovery (err %v)", open, err)
	}
	totals.checks += rep.Checks + 1
	return nil
}

// checkLost reads each damaged key twice: Corrupt (its metadata is then removed), then
// NotFound. The keys leave the ack file, since their loss has been reported to the client.
func checkLost(ctx context.Context, n *node.Node, h *harness, lost []string) error {
	if len(lost) == 0 {
		return nil
	}
	for _, want := range []kvoffload.GetStatus{kvoffload.Corrupt, kvoffload.NotFound} {
		res, err := n.BatchGet(ctx, lost)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Status != want {
				return fmt.Errorf("damaged record of %s reads %s (%s), want %s", r.Key, r.Status, r.Reason, want)
			}
		}
		totals.checks += len(res)
	}
	var keep []string
	for _, k := range h.acked() {
		if !slices.Contains(lost, k) {
			keep = append(keep, k)
		}
	}
	return os.WriteFile(h.ack, []byte(strings.Join(keep, "\n")+"\n"), 0o640)
}

var segmentName = regexp.MustCompile(`^[0-9]{20}$`)

// walNames returns the WAL directory and the names in it, sorted.
func walNames(t *testing.T, h *harness) (string, []string) {
	t.Helper()
	dir := filepath.Join(h.dir, "wal")
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(des))
	for i, de := range des {
		names[i] = de.Name()
	}
	return dir, names
}

// newestSegment returns the path of the WAL segment file with the highest first index.
func newestSegment(t *testing.T, h *harness) string {
	t.Helper()
	dir, names := walNames(t, h)
	for i := len(names) - 1; i >= 0; i-- {
		if segmentName.MatchString(names[i]) {
			return filepath.Join(dir, names[i])
		}
	}
	t.Fatal("the killed child left no WAL segment")
	return ""
}

// walFiles maps every file in the WAL directory to its content.
func walFiles(t *testing.T, h *harness) map[string]string {
	t.Helper()
	dir, names := walNames(t, h)
	out := map[string]string{}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	return out
}

// frames returns the start offsets of the entries of a WAL segment (tidwall framing:
// uvarint length, then the envelope) and the offset where each envelope starts.
func frames(t *testing.T, data []byte) (starts, bodies []int) {
	t.Helper()
	for off := 0; off < len(data); {
		v, n := varint.Uvarint(data[off:])
		if n <= 0 || off+n+int(v) > len(data) {
			t.Fatalf("the killed child left a damaged WAL at offset %d", off)
		}
		starts, bodies = append(starts, off), append(bodies, off+n)
		off += n + int(v)
	}
	return starts, bodies
}

// newestEntries reads the newest WAL segment and its entries (see frames). It fails the test
// when the segment holds fewer than two entries, which the mutation named by what needs.
func newestEntries(t *testing.T, h *harness, what string) (seg string, data []byte, starts, bodies []int) {
	t.Helper()
	seg = newestSegment(t, h)
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	starts, bodies = frames(t, data)
	if len(starts) < 2 {
		t.Fatalf("the newest WAL segment %s has %d entries (%d bytes); %s needs two (is the mutation's minHit too small?)",
			filepath.Base(seg), len(starts), len(data), what)
	}
	return seg, data, starts, bodies
}

// cutWALTail cuts 1 to 512 bytes off the newest segment, never more than it holds.
func cutWALTail(t *testing.T, h *harness, rng *rand.Rand) corruption {
	seg, data, _, _ := newestEntries(t, h, "the cut")
	size := int64(len(data))
	cut := 1 + rng.Int64N(min(size, 512))
	if err := os.Truncate(seg, size-cut); err != nil {
		t.Fatal(err)
	}
	return corruption{what: fmt.Sprintf("cut %d of %d bytes off %s", cut, size, filepath.Base(seg))}
}

func appendWAL(t *testing.T, h *harness, junk []byte, what string) corruption {
	seg := newestSegment(t, h)
	f, err := os.OpenFile(seg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(junk); err != nil {
		t.Fatal(err)
	}
	return corruption{what: fmt.Sprintf("appended %d bytes of %s to %s", len(junk), what, filepath.Base(seg))}
}

// flipWALMiddle flips one bit in the middle half of the newest segment. Start-up must refuse
// it, naming the entry it is in, unless it is in the envelope of the last entry, which a
// torn write could also have left (then a repair is allowed too).
func flipWALMiddle(t *testing.T, h *harness, rng *rand.Rand) corruption {
	seg, data, starts, bodies := newestEntries(t, h, "the flip")
	at := len(data)/4 + rng.IntN(max(1, len(data)/2))
	bit := byte(1) << rng.IntN(8)
	data[at] ^= bit
	if err := os.WriteFile(seg, data, 0o640); err != nil {
		t.Fatal(err)
	}
	k := len(starts) - 1
	for starts[k] > at {
		k--
	}
	c := corruption{
		what:   fmt.Sprintf("flipped bit %#x at offset %d of %s (%d bytes; entry %d of %d)", bit, at, filepath.Base(seg), len(data), k+1, len(starts)),
		refuse: &wal.CorruptError{File: seg, Offset: int64(starts[k])},
	}
	c.maybeRefuse = k == len(starts)-1 && at >= bodies[k]
	return c
}

// flipBucketRecords flips one bit in each of up to three records of acknowledged keys: in
// the first record's header or key, in the others' payload.
func flipBucketRecords(t *testing.T, h *harness, rng *rand.Rand) corruption {
	acked := h.acked()
	if len(acked) == 0 {
		t.Fatal("the killed child acknowledged nothing")
	}
	type rec struct {
		ext bucketstore.Extent
		h   bucketstore.Header
	}
	records := map[string][]rec{}
	dir := filepath.Join(h.dir, "buckets")
	cfg := bucketstore.DefaultConfig(dir)
	cfg.FS = vfs.OSFS{}
	s, err := bucketstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Scan(func(ext bucketstore.Extent, hd bucketstore.Header, err error) error {
		if err == nil {
			records[hd.Key] = append(records[hd.Key], rec{ext, hd})
		}
		return nil
	})
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	// A shared key is acknowledged once per batch that named it; damage each key once.
	slices.Sort(acked)
	acked = slices.Compact(acked)
	rng.Shuffle(len(acked), func(i, j int) { acked[i], acked[j] = acked[j], acked[i] })
	var c corruption
	var where []string
	for _, k := range acked {
		if len(c.lost) == 3 {
			break
		}
		if len(records[k]) != 1 { // not unambiguous: leave it alone
			continue
		}
		r := records[k][0]
		head := int64(56 + len(k)) // header and key (bucketstore record format)
		off := head + rng.Int64N(int64(r.h.PayloadLen))
		if len(c.lost) == 0 {
			off = rng.Int64N(head)
		}
		flipFileBit(t, filepath.Join(dir, fmt.Sprintf("bucket-%010d.kvb", r.ext.Bucket)), r.ext.Offset+off, rng)
		c.lost = append(c.lost, k)
		where = append(where, fmt.Sprintf("%s@+%d", k, off))
	}
	if len(c.lost) == 0 {
		t.Fatal("no acknowledged key has exactly one record")
	}
	c.what = "flipped a bit in the records of " + strings.Join(where, ", ")
	return c
}

func flipFileBit(t *testing.T, path string, off int64, rng *rand.Rand) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	old := bytes.Clone(b)
	b[0] ^= byte(1) << rng.IntN(8)
	if _, err := f.WriteAt(b, off); err != nil || bytes.Equal(old, b) {
		t.Fatalf("flip at %d of %s: %v", off, path, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}
