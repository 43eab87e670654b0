package fsm

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/kvoffload/kvoffload/internal/invariants"
)

// The record format of bucketstore (bucketstore/doc.go, "Record format"), restated here
// because this package is pure and imports no I/O package; txn's tests check that the two
// agree. An extent that breaks them cannot hold a record, so an entry naming it is corrupt
// metadata, whoever proposed it.
const (
	// ExtentAlignment is bucketstore.Alignment: every record starts at a multiple of it and
	// is padded to one.
	ExtentAlignment = 4096
	// MaxKeyLen is bucketstore.MaxKeyLen, the longest key a record holds.
	MaxKeyLen = 1024
	// MaxPayloadLen is bucketstore.MaxPayloadLen, the largest payload a record holds.
	MaxPayloadLen = 1 << 30
	// MaxRecordLength is bucketstore.MaxRecordLen, RecordLength(MaxKeyLen, MaxPayloadLen):
	// 1 GiB + 4 KiB, the longest extent an entry can name.
	MaxRecordLength = (recordHeaderLen + MaxKeyLen + MaxPayloadLen + ExtentAlignment - 1) &^ (ExtentAlignment - 1)

	recordHeaderLen = 56
)

// RecordLength is bucketstore.RecordSize: the padded length of the record of a keyLen-byte
// key and a size-byte payload, the only Extent.Length an entry with that key and Size can
// have.
func RecordLength(keyLen int, size uint32) int64 {
	return (int64(recordHeaderLen+keyLen) + int64(size) + ExtentAlignment - 1) &^ (ExtentAlignment - 1)
}

// ErrInvalidEntry: an entry names an extent no record can have, or bytes a live entry of the
// same owner already holds (CheckEntry, FSM.CheckCommit).
var ErrInvalidEntry = errors.New("fsm: invalid entry")

// CheckEntry reports why e cannot describe a record: an empty or over-long key, a payload
// over MaxPayloadLen, an extent not aligned to ExtentAlignment, or a Length other than
// RecordLength(len(Key), Size) (a Size inconsistent with the Length, or a Length over
// MaxRecordLength). The error wraps ErrInvalidEntry and names the limit and its value. Reads
// and start-up collection treat such an entry as corrupt metadata; the leader refuses a
// COMMIT holding one (CheckCommit).
func CheckEntry(e Entry) error {
	x := e.Extent
	switch {
	case e.Key == "" || len(e.Key) > MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes, the limit is 1 to %d", ErrInvalidEntry, len(e.Key), MaxKeyLen)
	case e.Size > MaxPayloadLen:
		return fmt.Errorf("%w: key %q: size %d exceeds the largest payload, %d bytes", ErrInvalidEntry, e.Key, e.Size, MaxPayloadLen)
	case x.Offset < 0 || x.Offset%ExtentAlignment != 0 || x.Length%ExtentAlignment != 0:
		return fmt.Errorf("%w: key %q: extent %+v is not aligned to %d", ErrInvalidEntry, e.Key, x, ExtentAlignment)
	case x.Length > MaxRecordLength:
		return fmt.Errorf("%w: key %q: extent length %d exceeds the largest record, %d bytes", ErrInvalidEntry, e.Key, x.Length, MaxRecordLength)
	case x.Length != RecordLength(len(e.Key), e.Size):
		return fmt.Errorf("%w: key %q: extent length %d, but a record of a %d-byte key and a %d-byte payload is %d bytes",
			ErrInvalidEntry, e.Key, x.Length, len(e.Key), e.Size, RecordLength(len(e.Key), e.Size))
	}
	return nil
}

// CheckCommit is the leader's check of a COMMIT another node forwarded, before it is proposed.
// It refuses (an error wrapping ErrInvalidEntry, naming the limit and its value):
//   - an owner (c.Node) other than proposer, the authenticated identity of the node that
//     forwarded it ("" when the peer is not authenticated: not checked);
//   - an entry CheckEntry refuses, or whose Length exceeds maxLength (the record of the
//     largest object the cluster accepts; 0 means MaxRecordLength);
//   - two entries whose extents overlap, or an entry whose extent overlaps the extent of a
//     live entry of another key with the same owner and bucket: the bucket store never hands
//     out bytes that are live, so such an entry names another key's record.
//
// Apply refuses the last two as well (OutcomeInvalid), so every replica agrees even on a
// COMMIT that bypassed this check; the rest depend on configuration and on who asked, which
// apply cannot know.
func (f *FSM) CheckCommit(c Commit, proposer string, maxLength int64) error {
	if proposer != "" && c.Node != proposer {
		return fmt.Errorf("%w: a COMMIT for owner %q forwarded by node %q: a node commits only its own bytes", ErrInvalidEntry, c.Node, proposer)
	}
	if maxLength <= 0 || maxLength > MaxRecordLength {
		maxLength = MaxRecordLength
	}
	for _, e := range c.Entries {
		if err := CheckEntry(e); err != nil {
			return err
		}
		if e.Extent.Length > maxLength {
			return fmt.Errorf("%w: key %q: extent length %d exceeds the record of the largest object accepted, %d bytes",
				ErrInvalidEntry, e.Key, e.Extent.Length, maxLength)
		}
	}
	sorted := slices.SortedFunc(slices.Values(c.Entries), func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Extent.Bucket, b.Extent.Bucket), cmp.Compare(a.Extent.Offset, b.Extent.Offset))
	})
	for i, far := 1, 0; i < len(sorted); i++ { // far: the entry reaching furthest so far
		if a, b := sorted[far], sorted[i]; a.Key != b.Key && a.Extent.Overlaps(b.Extent) {
			return fmt.Errorf("%w: keys %q and %q name overlapping extents %+v and %+v", ErrInvalidEntry, a.Key, b.Key, a.Extent, b.Extent)
		}
		if a, b := sorted[far].Extent, sorted[i].Extent; a.Bucket != b.Bucket || b.Offset+b.Length > a.Offset+a.Length {
			far = i
		}
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, e := range c.Entries {
		if o, ok := f.st.overlapping(c.Node, e.Extent, e.Key); ok {
			return fmt.Errorf("%w: key %q: extent %+v overlaps %+v of live key %q of owner %q",
				ErrInvalidEntry, e.Key, e.Extent, o.Extent, o.Key, c.Node)
		}
	}
	return nil
}

// Referenced reports whether a live entry of owner other than key's names bytes of ext. The
// owner frees a removed entry's bytes only when it returns false.
func (f *FSM) Referenced(owner string, ext Extent, key string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, ok := f.st.overlapping(owner, ext, key)
	return ok
}

// The extent index: for each owner and bucket, the live keys whose extents touch each
// indexChunk-byte chunk of the bucket. An overlap query visits the chunks the extent touches
// (at most MaxRecordLength/indexChunk + 1 of them) and the few keys in each. It is derived
// from live (maintained by addLive and delLive, rebuilt on Restore, never encoded), so it
// cannot make replicas diverge.
const indexChunk = 1 << 20

type chunkKey struct {
	owner  string
	bucket uint32
	chunk  int64
}

// indexable reports whether x is in the index: a non-empty extent within the bounds any
// record has. Others (a snapshot may hold one written before apply refused them) touch too
// many chunks to index; CheckEntry reports them wherever the entry is used.
func indexable(x Extent) bool {
	return x.Offset >= 0 && x.Length > 0 && x.Length <= MaxRecordLength && x.Offset <= 1<<62
}

// chunks calls fn with the index key of every chunk x touches, in order, until fn returns
// false.
func chunks(owner string, x Extent, fn func(chunkKey) bool) {
	for c := x.Offset / indexChunk; c <= (x.Offset+x.Length-1)/indexChunk; c++ {
		if !fn(chunkKey{owner: owner, bucket: x.Bucket, chunk: c}) {
			return
		}
	}
}

// base is the first byte of the chunk k names: offsets in its list are relative to it.
func (k chunkKey) base() int64 { return k.chunk * indexChunk }

// rel is offset off relative to chunk k. Every extent in the index and every query is
// indexable, so an offset relative to a chunk it touches lies in (-MaxRecordLength,
// indexChunk + MaxRecordLength): well inside an int32.
func (k chunkKey) rel(off int64) int32 { return int32(off - k.base()) }

// chunk returns the list of chunk k (nil: no live extent touches it). The chunk looked up
// last is kept aside: a COMMIT's records are neighbours in one bucket, so its keys look up the
// same chunk again and again, and a map lookup hashes the owner's name each time (the
// extent index's three lookups per key were ~30% of a 1M-key log replay's apply, node's
// BenchmarkStartup, a CPU profile). remember: keep k aside if it is not already; only a
// caller holding the FSM's write lock (apply) may, as readers under the read lock run
// concurrently (they read what is kept aside, which only apply writes).
func (s *state) chunk(k chunkKey, remember bool) *chunkList {
	if s.lastList != nil && s.lastKey == k {
		return s.lastList
	}
	l := s.extents[k]
	if l != nil && remember {
		s.lastKey, s.lastList = k, l
	}
	return l
}

// indexAdd indexes e, live at slot.
func (s *state) indexAdd(e Entry, slot uint32) {
	if !indexable(e.Extent) {
		return
	}
	chunks(e.Owner, e.Extent, func(k chunkKey) bool {
		l := s.chunk(k, true)
		if l == nil {
			l = new(chunkList)
			s.extents[k] = l
			s.lastKey, s.lastList = k, l
		}
		*l = l.insert(indexed{off: k.rel(e.Extent.Offset), end: k.rel(e.Extent.End()), slot: slot})
		return true
	})
}

// indexDel takes e, live at slot, out of the index.
func (s *state) indexDel(e Entry, slot uint32) {
	if !indexable(e.Extent) {
		return
	}
	chunks(e.Owner, e.Extent, func(k chunkKey) bool {
		l := s.chunk(k, true)
		if l == nil {
			if invariants.Enabled {
				invariants.Failf("fsm: the extent index holds every live entry", "key %q %+v: no chunk %+v", e.Key, e.Extent, k)
			}
			return true
		}
		before := len(*l)
		if *l = l.remove(slot, k.rel(e.Extent.Offset)); len(*l) == 0 {
			delete(s.extents, k)
			if s.lastList == l {
				s.lastList = nil
			}
		}
		if invariants.Enabled && len(*l) != before-1 {
			invariants.Failf("fsm: the extent index holds every live entry", "key %q %+v: not in chunk %+v", e.Key, e.Extent, k)
		}
		return true
	})
}

// overlapping returns a live entry of owner, of a key other than skip, whose extent overlaps
// x. An x that is not indexable overlaps nothing here (the caller refuses it first). It only
// reads the state: callers under the FSM's read lock use it.
func (s *state) overlapping(owner string, x Extent, skip string) (Entry, bool) {
	return s.overlaps(owner, x, skip, false)
}

// overlaps is overlapping; remember as in chunk (apply's callers, under the write lock).
func (s *state) overlaps(owner string, x Extent, skip string, remember bool) (Entry, bool) {
	if !indexable(x) {
		return Entry{}, false
	}
	var found Entry
	var ok bool
	chunks(owner, x, func(k chunkKey) bool {
		if l := s.chunk(k, remember); l == nil {
			return true
		} else if slot, hit := l.overlap(k.rel(x.Offset), k.rel(x.End()), skip, &s.live); hit {
			found, ok = s.live.at(slot), true
			return false
		}
		return true
	})
	return found, ok
}

// indexed is one live extent in a chunk of the extent index: 16 bytes (issue 9, memory per
// key), offsets relative to the chunk (chunkKey.rel) and the live entry by its slot.
type indexed struct {
	off int32
	end int32
	// reach is the largest end of this extent and of every extent before it in the list: a
	// query scanning back from a position stops where reach no longer passes its offset.
	reach int32
	slot  uint32 // the entry's slot in the live set (liveset.go)
}

// chunkList is the live extents touching one chunk, sorted by offset, each with the reach of
// its prefix. An overlap query binary-searches the first extent starting at or past the
// query's end and scans back only while the prefix reaches into the query, so it visits the
// extents near the query rather than every key of the chunk (256 of them for 4 KiB records:
// the map lookup per key took a third of apply's CPU, docs/benchmarks.md). Live extents of
// one owner normally never overlap (apply refuses a COMMIT that would), and then the scan
// looks at one or two extents; the reach keeps it exact when they do (a snapshot written
// before apply refused overlaps, or a forged one), so an overlap is never missed.
type chunkList []indexed

// overlap returns the slot of an extent of l, of a key other than skip, that overlaps
// [off, end).
func (l chunkList) overlap(off, end int32, skip string, live *liveSet) (uint32, bool) {
	i, _ := slices.BinarySearchFunc(l, end, func(e indexed, t int32) int { return cmp.Compare(e.off, t) })
	for j := i - 1; j >= 0 && l[j].reach > off; j-- { // extents starting before end, nearest first
		if e := l[j]; e.end > off && live.keyAt(e.slot) != skip {
			return e.slot, true
		}
	}
	return 0, false
}

func (l chunkList) insert(e indexed) chunkList {
	i, _ := slices.BinarySearchFunc(l, e.off, func(x indexed, t int32) int { return cmp.Compare(x.off, t) })
	l = slices.Insert(l, i, e)
	l.reachFrom(i)
	return l
}

func (l chunkList) remove(slot uint32, off int32) chunkList {
	i, _ := slices.BinarySearchFunc(l, off, func(x indexed, t int32) int { return cmp.Compare(x.off, t) })
	j := i
	for j < len(l) && l[j].off == off && l[j].slot != slot {
		j++
	}
	if j == len(l) || l[j].slot != slot { // not where it sorts: never, but keep the index exact
		if j = slices.IndexFunc(l, func(x indexed) bool { return x.slot == slot }); j < 0 {
			return l
		}
	}
	l = slices.Delete(l, j, j+1)
	l.reachFrom(j)
	return l
}

// reachFrom recomputes the prefix reach from position i on (an append, the common case,
// touches one element).
func (l chunkList) reachFrom(i int) {
	for ; i < len(l); i++ {
		l[i].reach = l[i].end
		if i > 0 {
			l[i].reach = max(l[i].end, l[i-1].reach)
		}
	}
}

// checkIndex verifies the extent index against a rebuild from live (state.check).
func (s *state) checkIndex() error {
	want := map[chunkKey][]string{}
	s.live.each(func(e Entry) bool {
		if indexable(e.Extent) {
			chunks(e.Owner, e.Extent, func(k chunkKey) bool { want[k] = append(want[k], e.Key); return true })
		}
		return true
	})
	if len(want) != len(s.extents) {
		return fmt.Errorf("extent index has %d chunks, live entries touch %d", len(s.extents), len(want))
	}
	for k, keys := range want {
		var l chunkList
		if p := s.extents[k]; p != nil {
			l = *p
		}
		if !slices.IsSortedFunc(l, func(a, b indexed) int { return cmp.Compare(a.off, b.off) }) {
			return fmt.Errorf("extent index chunk %+v is not sorted by offset", k)
		}
		var got []string
		var reach int32
		for i, x := range l {
			if !s.live.holds(x.slot) {
				return fmt.Errorf("extent index chunk %+v holds slot %d, not live", k, x.slot)
			}
			e := s.live.at(x.slot)
			if reach = max(reach, x.end); i == 0 {
				reach = x.end
			}
			if x.reach != reach {
				return fmt.Errorf("extent index chunk %+v: key %q reaches %d, its prefix reaches %d", k, e.Key, x.reach, reach)
			}
			if x.off != k.rel(e.Extent.Offset) || x.end != k.rel(e.Extent.End()) {
				return fmt.Errorf("extent index chunk %+v holds key %q at [%d, %d) from the chunk's start, live at %+v", k, e.Key, x.off, x.end, e.Extent)
			}
			got = append(got, e.Key)
		}
		if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(keys))) {
			return fmt.Errorf("extent index chunk %+v holds %q, live entries %q", k, got, keys)
		}
	}
	return nil
}
