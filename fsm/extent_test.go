package fsm

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// rec builds a well-formed entry: an aligned extent of exactly the record length of its key
// and size, at block (4 KiB) number block of bucket.
func rec(key string, gen uint64, bucket uint32, block int64, size uint32) Entry {
	return Entry{Key: key, Gen: gen, Sum: uint64(size), Size: size,
		Extent: Extent{Bucket: bucket, Offset: block * ExtentAlignment, Length: RecordLength(len(key), size)}}
}

func TestCheckEntry(t *testing.T) {
	ok := rec("k", 1, 1, 3, 5000)
	if err := CheckEntry(ok); err != nil {
		t.Fatalf("well-formed entry: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Entry)
		want string // part of the error, naming the limit and its value
	}{
		{"empty key", func(e *Entry) { e.Key = "" }, "1 to 1024"},
		{"long key", func(e *Entry) { e.Key = strings.Repeat("k", MaxKeyLen+1) }, "1 to 1024"},
		{"payload too large", func(e *Entry) { e.Size = MaxPayloadLen + 1 }, "largest payload, 1073741824 bytes"},
		{"offset misaligned", func(e *Entry) { e.Extent.Offset += 100 }, "not aligned to 4096"},
		{"negative offset", func(e *Entry) { e.Extent.Offset = -4096 }, "not aligned to 4096"},
		{"length misaligned", func(e *Entry) { e.Extent.Length = 5000 }, "not aligned to 4096"},
		{"16 TiB", func(e *Entry) { e.Extent.Length = 16 << 40 }, "largest record, 1073745920 bytes"},
		{"size inconsistent", func(e *Entry) { e.Size = 1 }, "a record of a 1-byte key and a 1-byte payload is 4096 bytes"},
		{"zero length", func(e *Entry) { e.Extent.Length = 0 }, "is 8192 bytes"},
	} {
		e := ok
		tc.edit(&e)
		err := CheckEntry(e)
		if !errors.Is(err, ErrInvalidEntry) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidEntry saying %q", tc.name, err, tc.want)
		}
	}
}

func TestCheckCommit(t *testing.T) {
	f := New()
	live := rec("live", 1, 1, 0, 10000) // blocks 0..2
	f.ApplyCommand(1, EncodeCommit(Commit{TxnID: id(1), Node: "n1", Entries: []Entry{live}}))
	commit := func(node string, es ...Entry) Commit { return Commit{TxnID: id(9), Node: node, Entries: es} }
	for _, tc := range []struct {
		name     string
		c        Commit
		proposer string
		max      int64
		want     string // "" = accepted
	}{
		{"fresh extent", commit("n1", rec("a", 1, 1, 3, 100)), "n1", 0, ""},
		{"unauthenticated", commit("n1", rec("a", 1, 1, 3, 100)), "", 0, ""},
		{"another owner's name", commit("n1", rec("a", 1, 1, 3, 100)), "n2", 0, `owner "n1" forwarded by node "n2"`},
		{"the live key again (a retry)", commit("n1", live), "n1", 0, ""},
		{"another key on live bytes", commit("n1", rec("b", 1, 1, 2, 100)), "n1", 0, `overlaps {Bucket:1 Offset:0 Length:12288} of live key "live"`},
		{"same bytes, another owner", commit("n2", rec("b", 1, 1, 0, 100)), "n2", 0, ""},
		{"same bytes, another bucket", commit("n1", rec("b", 1, 2, 0, 100)), "n1", 0, ""},
		{"two entries on the same bytes", commit("n1", rec("a", 1, 1, 10, 9000), rec("b", 1, 1, 11, 100)), "", 0, `keys "a" and "b" name overlapping extents`},
		{"a long entry over a later one", commit("n1", rec("a", 1, 1, 10, 90000), rec("a", 2, 1, 12, 100), rec("b", 1, 1, 20, 100)), "", 0, `keys "a" and "b"`},
		{"over the configured record size", commit("n1", rec("a", 1, 1, 10, 70000)), "", 65536, "largest object accepted, 65536 bytes"},
		{"misaligned", commit("n1", Entry{Key: "a", Size: 1, Gen: 1, Extent: Extent{Bucket: 1, Offset: 100, Length: 4096}}), "", 0, "not aligned to 4096"},
		{"16 TiB", commit("n1", Entry{Key: "a", Size: 1, Gen: 1, Extent: Extent{Bucket: 1, Offset: 1 << 30, Length: 16 << 40}}), "", 0, "1073745920"},
	} {
		err := f.CheckCommit(tc.c, tc.proposer, tc.max)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalidEntry) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want ErrInvalidEntry saying %q", tc.name, err, tc.want)
		}
	}
}

// Apply refuses, per key and identically on every replica, an entry out of every record's
// bounds or overlapping a live entry of the same owner and bucket; nothing panics, the rest of
// the command applies, and a refused key burns no generation.
func TestApplyRefusesInvalidExtents(t *testing.T) {
	a, b := New(), New()
	cmds := [][]byte{
		EncodeCommit(Commit{TxnID: id(1), Node: "n1", Entries: []Entry{rec("victim", 1, 1, 0, 10000)}}),
		EncodeCommit(Commit{TxnID: id(2), Node: "n1", Entries: []Entry{
			{Key: "forged", Gen: 1, Size: 10000, Extent: Extent{Bucket: 1, Offset: 0, Length: 12288}}, // the victim's bytes
			{Key: "inside", Gen: 1, Size: 1, Extent: Extent{Bucket: 1, Offset: 4096, Length: 4096}},   // inside them
			{Key: "huge", Gen: 1, Size: 1, Extent: Extent{Bucket: 1, Offset: 1 << 20, Length: 16 << 40}},
			{Key: "negative", Gen: 1, Size: 1, Extent: Extent{Bucket: 1, Offset: -4096, Length: 4096}},
			rec("fine", 1, 1, 3, 10),                          // just after the victim
			{Key: "empty", Gen: 1, Extent: Extent{Bucket: 1}}, // zero length overlaps nothing
		}}),
	}
	var res *Result
	for i, c := range cmds {
		res = a.ApplyCommand(uint64(i+1), c)
		b.ApplyCommand(uint64(i+1), c)
	}
	want := []Outcome{OutcomeInvalid, OutcomeInvalid, OutcomeInvalid, OutcomeInvalid, OutcomeStored, OutcomeStored}
	if got := outcomes(res); !equalOutcomes(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	for _, k := range []string{"forged", "inside", "huge", "negative"} {
		if _, ok := a.Lookup(k); ok || a.Generation(k) != 0 {
			t.Errorf("refused key %s: live %v, generation %d", k, ok, a.Generation(k))
		}
	}
	if a.Hash() != b.Hash() {
		t.Fatal("replicas diverge")
	}
	mustCheck(t, a)
	// A refused retry of the same txn is de-duplicated like any other.
	if again := a.ApplyCommand(9, cmds[1]); !equalOutcomes(outcomes(again), want) {
		t.Fatalf("retry: %v", outcomes(again))
	}
	// Once the victim is removed, its bytes may be committed again (Remove frees them).
	a.ApplyCommand(10, remove(3, KeyGen{Key: "victim"}))
	r := a.ApplyCommand(11, EncodeCommit(Commit{TxnID: id(4), Node: "n1", Entries: []Entry{rec("next", 1, 1, 0, 100)}}))
	if r.Keys[0].Outcome != OutcomeStored {
		t.Fatalf("bytes of a removed entry: %v", r.Keys[0].Outcome)
	}
	mustCheck(t, a)
}

func equalOutcomes(a, b []Outcome) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Entries that overlap can only come from a state written before apply refused them (a
// snapshot); removing one of them reports Shared while the other is live, so its owner keeps
// the bytes, and a Restore lists such entries in RestoreDiff.Shared.
func TestRemoveOfSharedBytes(t *testing.T) {
	f := New()
	real, forged := rec("real", 1, 1, 0, 100), rec("forged", 1, 1, 0, 100)
	real.Owner, forged.Owner = "n1", "n1"
	f.st.addLive(real)
	f.st.addLive(forged)
	mustCheck(t, f)
	var snap strings.Builder
	if _, err := f.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	r := f.ApplyCommand(1, remove(1, KeyGen{Key: "forged"}))
	if ko := r.Keys[0]; ko.Outcome != OutcomeRemoved || !ko.Shared {
		t.Fatalf("remove of the forged entry: %+v, want removed and shared", ko)
	}
	r = f.ApplyCommand(2, remove(2, KeyGen{Key: "real"}))
	if ko := r.Keys[0]; ko.Outcome != OutcomeRemoved || ko.Shared {
		t.Fatalf("remove of the last entry on the bytes: %+v, want removed, not shared", ko)
	}
	mustCheck(t, f)

	// Restore of the two-entry state: the index is rebuilt with both. Over a state holding
	// another version of "real" on the same bytes, that version is Gone and Shared (the
	// restored "real" and "forged" still reference the bytes).
	g := New()
	if err := g.Restore(strings.NewReader(snap.String())); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, g)
	var diff RestoreDiff
	h := New()
	h.WatchRestore(func(d RestoreDiff) { diff = d })
	old := rec("real", 1, 1, 0, 100)
	old.TxnID = id(7) // another version of "real" on the same bytes
	h.ApplyCommand(1, EncodeCommit(Commit{TxnID: id(7), Node: "n1", Entries: []Entry{old}}))
	if err := h.Restore(strings.NewReader(snap.String())); err != nil {
		t.Fatal(err)
	}
	if len(diff.Gone) != 1 || len(diff.Shared) != 1 || diff.Shared[0].Key != "real" {
		t.Fatalf("restore over another version on the same bytes: gone %v shared %v, want real in both", diff.Gone, diff.Shared)
	}
}

// The extent index answers like a scan of every live entry, under random commits and
// removes of small, often overlapping extents of two owners. Randomized: -fsm.seed reproduces.
func TestExtentIndexRandom(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	f := New()
	randExtent := func() Extent {
		// Chunks are 1 MiB: offsets over 4 MiB and lengths up to 2.5 MiB cross them.
		return Extent{Bucket: uint32(rng.IntN(2)), Offset: int64(rng.IntN(1024)) * 4096, Length: int64(1+rng.IntN(640)) * 4096}
	}
	for i := range 3000 {
		idx := uint64(i + 1)
		owner := "n" + strconv.Itoa(rng.IntN(2))
		key := "k" + strconv.Itoa(rng.IntN(200))
		if rng.IntN(3) == 0 {
			f.ApplyCommand(idx, EncodeRemove(Remove{TxnID: TxnID{byte(i), byte(i >> 8), 1}, Keys: []KeyGen{{Key: key}}}))
			continue
		}
		x := randExtent()
		_, scanned := scanOverlap(f, owner, x, "")
		if _, indexed := f.st.overlapping(owner, x, ""); indexed != scanned {
			t.Fatalf("step %d: index says overlap %v, a scan %v, for %s %+v", i, indexed, scanned, owner, x)
		}
		e := Entry{Key: key, Gen: f.Generation(key) + 1, Size: 1, Extent: x}
		_, live := f.Lookup(key)
		r := f.ApplyCommand(idx, EncodeCommit(Commit{TxnID: TxnID{byte(i), byte(i >> 8), 2}, Node: owner, Entries: []Entry{e}}))
		if !live && (r.Keys[0].Outcome == OutcomeInvalid) != scanned {
			t.Fatalf("step %d: outcome %s, overlap by scan %v", i, r.Keys[0].Outcome, scanned)
		}
		if i%100 == 0 {
			mustCheck(t, f)
		}
	}
	mustCheck(t, f)
}

// scanOverlap is the model of state.overlapping: a scan of every live entry.
func scanOverlap(f *FSM, owner string, x Extent, skip string) (Entry, bool) {
	var found Entry
	var ok bool
	f.ForEach(func(e Entry) bool {
		if e.Owner == owner && e.Key != skip && e.Extent.Overlaps(x) {
			found, ok = e, true
			return false
		}
		return true
	})
	return found, ok
}
