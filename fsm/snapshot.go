package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/kvoffload/kvoffload/internal/invariants"
)

// Snapshot wire format (version 4; versions 3 and 2 are read too: 3 has no removed section,
// 2 neither that nor the cluster ID, and its member records have no peer addr; version 1 had
// no members section and is refused). The constants are wire format.
//
//	magic   "KVFS" (4 bytes) | version byte (snapshotVersion)
//	applied uvarint
//	n uvarint | n x fullEntry                       live entries, strictly increasing key
//	n uvarint | n x (key str | gen uvarint)         generations, strictly increasing key
//	n uvarint | n x result                          txn results, strictly increasing TxnID
//	n uvarint | n x member                          member records, strictly increasing node
//	cluster str                                     the cluster ID, "" if none (not in version 2)
//	n uvarint | n x node str                        removed node IDs, strictly increasing (version 4)
//	sum     uint64 little-endian: xxhash64 of every byte before it
//
//	fullEntry: cmdEntry (see codec.go) | owner str | txn [16]byte
//	result:    txn [16]byte | type byte | index uvarint | aborted byte (0/1) |
//	           n uvarint | n x (key str | outcome byte | fullEntry)
//	member:    node str | raft addr str | api addr str | peer addr str   (see codec.go)
//
// The generations section lists every key with a generation, live keys included, and every
// txn result carries its full entries, however compactly the state holds them (record.go).
// Derived counters (Stats.Bytes, Owners) are not encoded: Restore recomputes them from the
// live entries. Restore checks the sum, the ordering and what else the bytes could make wrong
// (checkDecoded) before it swaps the new state in, and never panics (FuzzRestore).
//
// Hash() is the xxhash64 of the same bytes (everything before sum), so equal
// Hash means byte-identical snapshots.
//
// TestSnapshotGolden holds the bytes to testdata/snapshot-v4.golden; testdata/snapshot-v3.golden,
// written by a version 3 binary, must still restore (TestSnapshotV3Restores).
const (
	snapshotMagic   = "KVFS"
	snapshotVersion = 4
	// snapshotVersionNoRemoved is an earlier version still read: no removed section.
	snapshotVersionNoRemoved = 3
	// snapshotVersionNoPeer is the earliest version still read: members without peer addr,
	// no cluster ID.
	snapshotVersionNoPeer = 2
	flushAt               = 64 << 10
)

// Snapshot is a point-in-time copy of the FSM state. It shares no mutable
// memory with the FSM, so WriteTo may run concurrently with ApplyCommand.
type Snapshot struct{ st *state }

// Snapshot captures the state under the read lock. The copy is O(keys + txns + members): the
// live slab's pages and index are copied (~96 bytes per live key), the generations and
// members maps cloned, the txn records shared (immutable); encoding happens later in WriteTo.
func (f *FSM) Snapshot() *Snapshot {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &Snapshot{st: &state{
		live:    f.st.live.clone(),
		gens:    maps.Clone(f.st.gens),
		txns:    maps.Clone(f.st.txns), // records are immutable: sharing them is safe
		members: maps.Clone(f.st.members),
		removed: maps.Clone(f.st.removed),
		cluster: f.st.cluster,
		applied: f.st.applied,
		bytes:   f.st.bytes,
		owners:  maps.Clone(f.st.owners),
	}}
}

// WriteTo writes the snapshot in the format above.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	d := xxhash.New()
	if err := s.st.encode(io.MultiWriter(cw, d)); err != nil {
		return cw.n, fmt.Errorf("fsm: write snapshot: %w", err)
	}
	if _, err := cw.Write(binary.LittleEndian.AppendUint64(nil, d.Sum64())); err != nil {
		return cw.n, fmt.Errorf("fsm: write snapshot checksum: %w", err)
	}
	return cw.n, nil
}

// Hash returns the xxhash64 of the canonical encoding of the state: live
// entries, generations, txn results, members and the applied index. Two FSMs with equal
// Hash hold identical state.
func (f *FSM) Hash() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	d := xxhash.New()
	if err := f.st.encode(d); err != nil {
		panic(fmt.Sprintf("fsm: hashing state: %v (xxhash writes cannot fail)", err))
	}
	return d.Sum64()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// encode writes the canonical body (everything but the trailing sum).
func (s *state) encode(w io.Writer) error {
	e := encoder{buf: make([]byte, 0, flushAt+4096)}
	var werr error
	flush := func(force bool) {
		if werr == nil && (force || len(e.buf) >= flushAt) {
			_, werr = w.Write(e.buf)
			e.buf = e.buf[:0]
		}
	}
	e.buf = append(e.buf, snapshotMagic...)
	e.byte1(snapshotVersion)
	e.uvarint(s.applied)

	live := s.live.sorted()
	e.uvarint(uint64(len(live)))
	for i := range live {
		e.fullEntry(live[i])
		flush(false)
	}
	// The generations of live keys (their entries' Gen) and of the others (gens), merged in
	// key order: the section lists every key with a generation, as it always has.
	other := slices.Sorted(maps.Keys(s.gens))
	e.uvarint(uint64(len(live) + len(other)))
	for i, j := 0, 0; i < len(live) || j < len(other); {
		if j == len(other) || i < len(live) && live[i].Key < other[j] {
			e.str(live[i].Key)
			e.uvarint(live[i].Gen)
			i++
		} else {
			e.str(other[j])
			e.uvarint(s.gens[other[j]])
			j++
		}
		flush(false)
	}
	ids := slices.SortedFunc(maps.Keys(s.txns), func(a, b TxnID) int { return bytes.Compare(a[:], b[:]) })
	e.uvarint(uint64(len(ids)))
	for _, id := range ids {
		rec := s.txns[id]
		e.resultOf(&rec.hdr, len(rec.keys), func(i int) KeyOutcome { return s.outcome(rec, i) }, false)
		flush(false)
	}
	keys := slices.Sorted(maps.Keys(s.members))
	e.uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.member(s.members[k])
		flush(false)
	}
	e.str(s.cluster)
	removed := slices.Sorted(maps.Keys(s.removed))
	e.uvarint(uint64(len(removed)))
	for _, id := range removed {
		e.str(id)
		flush(false)
	}
	flush(true)
	return werr
}

// Restore replaces the state with the snapshot read from r. It builds the new
// state completely and checks it before swapping it in; on error the FSM is
// unchanged. The Watch hook is kept and not called; the WatchRestore hook is called
// with what changed.
func (f *FSM) Restore(r io.Reader) error {
	st, err := decodeSnapshot(r)
	if err != nil {
		return err
	}
	if invariants.Enabled {
		if err := st.checkBuilt(); err != nil {
			invariants.Failf("fsm: a decoded state has the invariants apply builds (checkBuilt)", "%v", err)
		}
	}
	f.mu.Lock()
	old := f.st
	f.st = st
	fn, changes := f.restored, f.changes
	f.mu.Unlock()
	if fn != nil {
		// Under the read lock, not the write lock: readers are not held up by the diff.
		f.mu.RLock()
		d := diffLive(old, st)
		f.mu.RUnlock()
		fn(d)
	}
	if changes != nil {
		changes.Restored(st.applied)
	}
	f.setHooked(st.applied)
	return nil
}

func decodeSnapshot(r io.Reader) (*state, error) {
	d := newStreamDecoder(r)
	var magic [len(snapshotMagic) + 1]byte
	d.full("snapshot header", magic[:])
	if d.err == nil && (string(magic[:4]) != snapshotMagic || magic[4] < snapshotVersionNoPeer || magic[4] > snapshotVersion) {
		return nil, fmt.Errorf("%w: header %q, want %q version %d to %d", ErrBadSnapshot, magic[:], snapshotMagic, snapshotVersionNoPeer, snapshotVersion)
	}
	st := newState()
	st.applied = d.uvarint("applied index")
	st.decodeBody(d, magic[4])
	if d.err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, d.err)
	}
	want := d.digest()
	if err := d.fill(8); err != nil {
		return nil, fmt.Errorf("%w: reading checksum: %w", ErrBadSnapshot, err)
	}
	if got := binary.LittleEndian.Uint64(d.mem); got != want {
		return nil, fmt.Errorf("%w: checksum %016x, computed %016x", ErrBadSnapshot, got, want)
	}
	d.mem = d.mem[8:]
	if err := d.fill(1); err == nil {
		return nil, fmt.Errorf("%w: trailing data after checksum", ErrBadSnapshot)
	} else if err != io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("%w: after the checksum: %w", ErrBadSnapshot, err)
	}
	if err := st.checkDecoded(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	return st, nil
}

// decodeBody reads the sections of a snapshot of version, checking strict ordering as it
// goes.
func (st *state) decodeBody(d *decoder, version byte) {
	withPeer := version >= snapshotVersionNoRemoved // member records carry a peer address
	n, _ := d.count("live count", 1)
	prev := ""
	// Keys strictly increasing so far: each is new, no lookup needed. They are added a group
	// at a time, the group's home cells in the key index loaded first (KeyIndex.Warm), and
	// counted against their owner once per run of one owner: key by key, the index's cache
	// misses and the owner's map were a fifth of a 1M-key restore (node's BenchmarkStartup
	// -startup-snapshot, -cpuprofile).
	group := make([]Entry, 0, warmGroup)
	addGroup := func() {
		st.live.idx.Warm(func(i int) string { return group[i].Key }, len(group))
		for lo := 0; lo < len(group); {
			hi, bytes := lo, int64(0)
			for ; hi < len(group) && group[hi].Owner == group[lo].Owner; hi++ {
				st.addLiveUncounted(group[hi])
				bytes += int64(group[hi].Size)
			}
			st.countOwner(group[lo].Owner, hi-lo, bytes)
			lo = hi
		}
		group = group[:0]
	}
	for i := 0; i < n && d.err == nil; i++ {
		e := d.fullEntry()
		if i > 0 && strings.Compare(e.Key, prev) <= 0 {
			d.fail(fmt.Errorf("live key %q not after %q", e.Key, prev))
		}
		if e.Gen == 0 && d.err == nil {
			d.fail(fmt.Errorf("live key %q at generation 0", e.Key))
		}
		if d.err == nil {
			if group = append(group, e); len(group) == cap(group) {
				addGroup()
			}
		}
		prev = e.Key
	}
	if d.err == nil {
		addGroup()
	}
	n, _ = d.count("generation count", 1)
	liveGens := 0
	// The live keys sit at slots 0, 1, ... in key order (added in order to a new set), and
	// each has its generation in this section, in the same order: next is the slot of the
	// live key the section should name next. A key equal to it reuses its string and needs
	// no lookup (at 1M keys, a million allocations and lookups fewer); any other key takes
	// the lookup, so a section that breaks the pattern fails as it did.
	next := uint32(0)
	for i := 0; i < n && d.err == nil; i++ {
		like := ""
		if int(next) < st.live.len() {
			like = st.live.keyAt(next)
		}
		k := d.strLike("gen key", like)
		g := d.uvarint("gen")
		if i > 0 && strings.Compare(k, prev) <= 0 {
			d.fail(fmt.Errorf("generation key %q not after %q", k, prev))
		}
		prev = k
		e, live := Entry{}, false
		if int(next) < st.live.len() && k == like {
			e, live = st.live.at(next), true
			next++
		} else {
			e, live = st.live.get(k)
		}
		if !live {
			st.gens[k] = g
		} else if g != e.Gen || g == 0 {
			d.fail(fmt.Errorf("live %q gen %d, generation table %d", k, e.Gen, g))
		} else {
			liveGens++
		}
	}
	if d.err == nil && liveGens != st.live.len() {
		d.fail(fmt.Errorf("generation table holds %d of the %d live keys", liveGens, st.live.len()))
	}
	n, _ = d.count("txn count", 1)
	var prevID TxnID
	for i := 0; i < n && d.err == nil; i++ {
		r := d.resultRecord(false)
		if i > 0 && bytes.Compare(r.TxnID[:], prevID[:]) <= 0 {
			d.fail(fmt.Errorf("txn %s not after %s", r.TxnID, prevID))
		}
		prevID = r.TxnID
		// live is complete: its section came first. The outcomes' keys are looked up in it,
		// their home cells loaded first.
		st.live.idx.Warm(func(i int) string { return r.Keys[i].Key }, len(r.Keys))
		st.txns[r.TxnID] = st.record(r)
	}
	n, _ = d.count("member count", 1)
	for i := 0; i < n && d.err == nil; i++ {
		m := d.member(withPeer)
		if i > 0 && strings.Compare(m.NodeID, prev) <= 0 {
			d.fail(fmt.Errorf("member %q not after %q", m.NodeID, prev))
		}
		prev = m.NodeID
		st.members[m.NodeID] = m
	}
	if withPeer { // version 3 on: the cluster ID follows
		st.cluster = d.str("cluster id")
	}
	if version < snapshotVersion {
		return
	}
	n, _ = d.count("removed count", 1)
	for i := 0; i < n && d.err == nil; i++ {
		id := d.str("removed node")
		if i > 0 && strings.Compare(id, prev) <= 0 {
			d.fail(fmt.Errorf("removed node %q not after %q", id, prev))
		}
		prev = id
		st.removed[id] = true
	}
}

// check verifies the state's invariants (tests, after every step): those its own code keeps
// (checkBuilt) and those a snapshot's bytes could break (checkDecoded).
func (st *state) check() error {
	return errors.Join(st.checkBuilt(), st.checkDecoded())
}

// checkBuilt verifies the invariants that apply and decoding build: the slab and its key
// index, the byte and owner counters, no live key in the table of keys not live, the extent
// index, and the records' references to live slots. A state decoded from a snapshot has them
// by construction (decodeBody adds live keys it has checked to be strictly increasing, puts
// a key in the generation table only if it is not live, and record builds the references),
// so Restore skips them: at 1M keys they were ~0.5 s of a 2.8 s start-up from a snapshot
// (node's BenchmarkStartup -startup-snapshot, a CPU profile). FuzzRestore and the property
// tests run them on every state Restore accepts.
func (st *state) checkBuilt() error {
	var errs []error
	var sum int64
	owners := make(map[string]OwnerStats)
	if err := st.live.check(); err != nil {
		errs = append(errs, err)
	}
	st.live.each(func(e Entry) bool {
		if g, dup := st.gens[e.Key]; dup {
			errs = append(errs, fmt.Errorf("live %q gen %d, and in the table of keys not live (gen %d)", e.Key, e.Gen, g))
		}
		sum += int64(e.Size)
		o := owners[e.Owner]
		o.Keys++
		o.Bytes += int64(e.Size)
		owners[e.Owner] = o
		return true
	})
	if sum != st.bytes {
		errs = append(errs, fmt.Errorf("bytes %d, live entries sum to %d", st.bytes, sum))
	}
	if !maps.Equal(owners, st.owners) {
		errs = append(errs, fmt.Errorf("owner counters %v, live entries count %v", st.owners, owners))
	}
	if err := st.checkIndex(); err != nil {
		errs = append(errs, err)
	}
	for _, rec := range st.txns {
		if err := st.checkRecord(rec); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkDecoded verifies what a snapshot's bytes could make wrong and decodeBody does not
// refuse as it reads: each member's ID, and each txn result's ID, type, abort mark and
// outcomes (read from the record as stored, without expanding it into a Result).
func (st *state) checkDecoded() error {
	var errs []error
	for k, m := range st.members {
		if m.NodeID != k || k == "" {
			errs = append(errs, fmt.Errorf("members[%q] holds node %q", k, m.NodeID))
		}
	}
	for id, rec := range st.txns {
		r := &rec.hdr
		if r.TxnID != id {
			errs = append(errs, fmt.Errorf("txns[%s] holds %s", id, r.TxnID))
		}
		// Aborted marks an ABORT, or a SetCluster refused for naming another cluster.
		if r.Type < CmdCommit || r.Type > CmdCluster || r.Aborted != (r.Type == CmdAbort) && r.Type != CmdCluster {
			errs = append(errs, fmt.Errorf("txn %s: type %s aborted %v", id, r.Type, r.Aborted))
		}
		if (r.Type == CmdMember || r.Type == CmdPrune) && len(rec.keys) != 0 {
			errs = append(errs, fmt.Errorf("txn %s: member result has %d keys", id, len(rec.keys)))
		}
		for i, k := range rec.keys {
			if k.outcome < OutcomeStored || k.outcome > OutcomeInvalid {
				errs = append(errs, fmt.Errorf("txn %s key %q: outcome %d", id, st.outcome(rec, i).Key, k.outcome))
			}
		}
	}
	return errors.Join(errs...)
}
