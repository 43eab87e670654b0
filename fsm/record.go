package fsm

import "fmt"

// The recorded transaction results (state.txns), kept compact. Up to RetainTxnResults
// results are kept (node.Config), each with one KeyOutcome per key of its command, so with a
// full Entry per outcome the table held ~120 bytes for every recently committed key (issue 9,
// memory per key). Almost every recorded outcome is a Stored one whose Entry is exactly the
// key's live entry, committed by that very transaction: a record keeps such an outcome as a
// reference to the live entry (its key and outcome, 24 bytes) and expands it on read. The
// expanded Result is the one apply made, field for field, so TxnResult, de-duplication,
// snapshots and Hash are what they were.
//
// The reference holds while the live entry is unchanged. A live entry changes only through
// delLive (a key is made live only when it is not), and a live entry committed by txn T can
// be referenced only by T's record (the reference requires Entry.TxnID == T): delLive turns
// that record's references into entries first (materialize). Records are never mutated,
// only replaced, so a Snapshot that shares them (with its own copy of live) stays exact.

// record is a recorded Result: hdr holds TxnID, Type, Index and Aborted (its Keys is nil).
type record struct {
	hdr     Result
	keys    []recKey
	entries []Entry // the entries of outcomes that are neither references nor zero
	refs    int     // outcomes with entry == entryLive
}

// recKey is one KeyOutcome of a record.
type recKey struct {
	key     string
	outcome Outcome
	shared  bool
	entry   int32 // entryLive, entryZero or an index into record.entries
}

const (
	entryLive int32 = -1 // the key's live entry, committed by the record's txn
	entryZero int32 = -2 // the zero Entry (Stale, Absent, Invalid)
)

// record returns the compact form of r against the live entries of s.
func (s *state) record(r *Result) *record {
	rec := &record{hdr: *r}
	rec.hdr.Keys = nil
	if len(r.Keys) > 0 {
		rec.keys = make([]recKey, len(r.Keys))
	}
	for i, ko := range r.Keys {
		k := recKey{key: ko.Key, outcome: ko.Outcome, shared: ko.Shared, entry: entryZero}
		if ko.Entry != (Entry{}) {
			if cur, ok := s.live.get(ko.Key); ok && ko.Entry.TxnID == r.TxnID && cur == ko.Entry {
				k.entry = entryLive
				rec.refs++
			} else {
				k.entry = int32(len(rec.entries))
				rec.entries = append(rec.entries, ko.Entry)
			}
		}
		rec.keys[i] = k
	}
	return rec
}

// outcome returns the i-th KeyOutcome of rec, as it was recorded.
func (s *state) outcome(rec *record, i int) KeyOutcome {
	k := rec.keys[i]
	ko := KeyOutcome{Key: k.key, Outcome: k.outcome, Shared: k.shared}
	switch k.entry {
	case entryZero:
	case entryLive:
		ko.Entry, _ = s.live.get(k.key)
	default:
		ko.Entry = rec.entries[k.entry]
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
	c := &record{hdr: rec.hdr, keys: append([]recKey(nil), rec.keys...),
		entries: append(make([]Entry, 0, len(rec.entries)+rec.refs), rec.entries...)}
	for i, k := range c.keys {
		if k.entry == entryLive {
			c.keys[i].entry = int32(len(c.entries))
			e, _ := s.live.get(k.key)
			c.entries = append(c.entries, e)
		}
	}
	s.txns[id] = c
}

// checkRecord verifies rec's references: each names a key live with an entry of rec's txn.
func (s *state) checkRecord(rec *record) error {
	refs := 0
	for _, k := range rec.keys {
		if k.entry != entryLive {
			continue
		}
		refs++
		if e, ok := s.live.get(k.key); !ok || e.TxnID != rec.hdr.TxnID {
			return fmt.Errorf("txn %s: key %q refers to a live entry of this txn, live %v (txn %s)", rec.hdr.TxnID, k.key, ok, e.TxnID)
		}
	}
	if refs != rec.refs {
		return fmt.Errorf("txn %s: %d references to live entries, counted %d", rec.hdr.TxnID, refs, rec.refs)
	}
	return nil
}
