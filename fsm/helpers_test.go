package fsm

import "hash/fnv"

// id returns a TxnID whose first byte is n.
func id(n byte) TxnID { return TxnID{n} }

// ent builds an entry; the extent is derived from key and sum, so equal sums of one key mean
// equal bytes and different keys never share bytes (their buckets differ).
func ent(key string, gen, sum uint64) Entry {
	e := entShared(key, gen, sum)
	h := fnv.New32a()
	h.Write([]byte(key))
	e.Extent.Bucket = h.Sum32()
	return e
}

// entShared is ent with every key in bucket 1: entries of different keys with equal sums name
// the same bytes, which apply refuses (OutcomeInvalid) while the first is live.
func entShared(key string, gen, sum uint64) Entry {
	return Entry{Key: key, Gen: gen, Sum: sum, Size: 10, Extent: Extent{Bucket: 1, Offset: int64(sum) * 10, Length: 10}}
}

func commit(txn byte, entries ...Entry) []byte {
	return EncodeCommit(Commit{TxnID: id(txn), Node: "n1", Entries: entries})
}

func abort(txn byte) []byte {
	return EncodeAbort(Abort{TxnID: id(txn), Node: "n1", Reason: "test"})
}

func remove(txn byte, keys ...KeyGen) []byte {
	return EncodeRemove(Remove{TxnID: id(txn), Keys: keys, Reason: "test"})
}

func setMember(txn byte, node, raftAddr, apiAddr string) []byte {
	return EncodeSetMember(SetMember{TxnID: id(txn), Member: Member{NodeID: node, RaftAddr: raftAddr, APIAddr: apiAddr}})
}

func delMember(txn byte, node string) []byte {
	return EncodeSetMember(SetMember{TxnID: id(txn), Member: Member{NodeID: node}, Remove: true})
}

// mustCheck fails the test if f's invariants do not hold.
func mustCheck(t interface {
	Helper()
	Fatalf(format string, args ...any)
}, f *FSM) {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.st.check(); err != nil {
		t.Fatalf("invariants: %v", err)
	}
}

func outcomes(r *Result) []Outcome {
	out := make([]Outcome, len(r.Keys))
	for i, k := range r.Keys {
		out[i] = k.Outcome
	}
	return out
}
