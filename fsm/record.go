package fsm

import "fmt"

// The recorded transaction results (state.txns), kept compact. Up to RetainTxnResults
// results are kept (node.Config), each with one KeyOutcome per key of its command, so with a
// full Entry per outcome the table held ~120 bytes for every recently committed key (issue 9,
// memory per key). Almost every recorded outcome is a Stored one whose Entry is exactly the
// key's live entry, committed by that very transaction: a record keeps such an outcome as a
// reference to the live entry's slot (8 bytes with the outcome) and expands it on read. The
// expanded Result is the one apply made, field for field, so TxnResult, de-duplication,
// snapshots and Hash are what they were.
//
// The reference holds while the live entry is unchanged, and so is its slot (liveset.go: a
// slot is reused only after del). A live entry changes only through delLive (a key is made
// live only when it is not), and a live entry committed by txn T can
// be referenced only by T's record (the reference requires Entry.TxnID == T): delLive turns
// that record's references into entries first (materialize). Records are never mutated,
// only replaced, so a Snapshot that shares them (with its own copy of the live slab, slot for
// slot) stays exact.

// record is a recorded Result: hdr holds TxnID, Type, Index and Aborted (its Keys is nil).
type record struct {
	hdr     Result
	keys    []recKey
	entries []Entry  // the entries of outcomes that are not references (refEntry)
	names   []string // the keys of outcomes with the zero Entry (refName)
	others  []KeyOutcome
	refs    int // outcomes that are references to live entries (refLive)
}

// recKey is one KeyOutcome of a record: 8 bytes.
type recKey struct {
	ref     uint32 // a live slot (refLive), an index into entries (refEntry) or into names (refName)
	outcome Outcome
	shared  bool
	kind    uint8
}

// The kinds of recKey.
const (
	refLive  uint8 = iota // the live entry at slot ref (liveset.go), committed by the record's txn
	refEntry              // entries[ref]
	refName               // the zero Entry (Stale, Absent, Invalid) of key names[ref]
	refOther              // others[ref]: an outcome whose Key is not its Entry's (only a forged snapshot)
)

// record returns the compact form of r against the live entries of s.
func (s *state) record(r *Result) *record {
	rec := &record{hdr: *r}
	rec.hdr.Keys = nil
	if len(r.Keys) > 0 {
		rec.keys = make([]recKey, len(r.Keys))
	}
	for i, ko := range r.Keys {
		k := recKey{outcome: ko.Outcome, shared: ko.Shared}
		slot, live := s.live.slot(ko.Key)
		switch {
		case ko.Entry == (Entry{}):
			k.kind, k.ref = refName, uint32(len(rec.names))
			rec.names = append(rec.names, ko.Key)
		case live && ko.Entry.TxnID == r.TxnID && ko.Entry.Key == ko.Key && s.live.at(slot) == ko.Entry:
			k.kind, k.ref = refLive, slot
			rec.refs++
		case ko.Entry.Key != ko.Key:
			k.kind, k.ref = refOther, uint32(len(rec.others))
			rec.others = append(rec.others, ko)
		default:
			k.kind, k.ref = refEntry, uint32(len(rec.entries))
			rec.entries = append(rec.entries, ko.Entry)
		}
		rec.keys[i] = k
	}
	return rec
}

// outcome returns the i-th KeyOutcome of rec, as it was recorded.
func (s *state) outcome(rec *record, i int) KeyOutcome {
	k := rec.keys[i]
	ko := KeyOutcome{Outcome: k.outcome, Shared: k.shared}
	switch k.kind {
	case refName:
		ko.Key = rec.names[k.ref]
	case refLive:
		ko.Entry = s.live.at(k.ref)
		ko.Key = ko.Entry.Key
	case refOther:
		ko.Key, ko.Entry = rec.others[k.ref].Key, rec.others[k.ref].Entry
	default:
		ko.Entry = rec.entries[k.ref]
		ko.Key = ko.Entry.Key
	}
	return ko
}

// expand returns the Result rec records, a copy the caller may keep (Keys nil when there are
// none, as Result.clone makes it).
func (s *state) expand(rec *record) *Result {
	r := rec.hdr
	if len(rec.keys) > 0 {
		r.Keys = make([]KeyOutcome, len(rec.keys))
		for i := range rec.keys {
			r.Keys[i] = s.outcome(rec, i)
		}
	}
	return &r
}

// materialize replaces the record of txn id, if it references live entries, by one that
// holds them: delLive calls it before a live entry committed by id changes.
func (s *state) materialize(id TxnID) {
	rec, ok := s.txns[id]
	if !ok || rec.refs == 0 {
		return
	}
	c := &record{hdr: rec.hdr, keys: append([]recKey(nil), rec.keys...), names: rec.names, others: rec.others,
		entries: append(make([]Entry, 0, len(rec.entries)+rec.refs), rec.entries...)}
	for i, k := range c.keys {
		if k.kind == refLive {
			c.keys[i].kind, c.keys[i].ref = refEntry, uint32(len(c.entries))
			c.entries = append(c.entries, s.live.at(k.ref))
		}
	}
	s.txns[id] = c
}

// checkRecord verifies rec's references: each names a live slot holding an entry of rec's
// txn.
func (s *state) checkRecord(rec *record) error {
	refs := 0
	for _, k := range rec.keys {
		if k.kind != refLive {
			continue
		}
		refs++
		if !s.live.holds(k.ref) || s.live.slotAt(k.ref).txn != rec.hdr.TxnID {
			return fmt.Errorf("txn %s: an outcome refers to live slot %d, which holds no entry of this txn", rec.hdr.TxnID, k.ref)
		}
	}
	if refs != rec.refs {
		return fmt.Errorf("txn %s: %d references to live entries, counted %d", rec.hdr.TxnID, refs, rec.refs)
	}
	return nil
}
