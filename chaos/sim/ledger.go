package sim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/kvoffload/kvoffload/fsm"
)

// ledger holds, for a cluster, every Result a member's FSM recorded (fsm.FSM.Watch), by
// log index and by txn ID, to check as they are applied:
//   - I6: every member, in every life, records the same Result at the same index (the
//     members' FSMs agree on the committed prefix);
//   - I7: a txn ID has one outcome cluster-wide: its Result is recorded at one index only
//     (an FSM de-duplicates a command whose txn ID has a Result: Watch does not see it).
type ledger struct {
	mu      sync.Mutex
	byIndex map[uint64]ledgerEntry
	byTxn   map[fsm.TxnID]uint64
	err     error // the first violation
	checks  int
}

type ledgerEntry struct {
	digest uint64
	member string // the first to record it
	what   string
}

func newLedger() *ledger {
	return &ledger{byIndex: map[uint64]ledgerEntry{}, byTxn: map[fsm.TxnID]uint64{}}
}

// record checks r, recorded by member's FSM, against what the ledger holds and adds it.
func (l *ledger) record(member string, r *fsm.Result) {
	d, what := digest(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checks += 2
	if e, ok := l.byIndex[r.Index]; !ok {
		l.byIndex[r.Index] = ledgerEntry{d, member, what}
	} else if e.digest != d && l.err == nil {
		l.err = violation{"I6", fmt.Sprintf("index %d", r.Index),
			fmt.Sprintf("%s recorded %s, %s recorded %s", e.member, e.what, member, what)}
	}
	if r.TxnID == (fsm.TxnID{}) {
		return
	}
	if i, ok := l.byTxn[r.TxnID]; !ok {
		l.byTxn[r.TxnID] = r.Index
	} else if i != r.Index && l.err == nil {
		l.err = violation{"I7", fmt.Sprintf("txn %x", r.TxnID[:4]),
			fmt.Sprintf("a second outcome: at index %d (%s, on %s), first at %d", r.Index, what, member, i)}
	}
}

// failed returns the first violation, and the checks made.
func (l *ledger) failed() (error, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.checks
	l.checks = 0
	return l.err, n
}

// digest hashes every field of r a replica must agree on, and describes it.
func digest(r *fsm.Result) (uint64, string) {
	h := fnv.New64a()
	var b [8]byte
	put := func(v uint64) { binary.LittleEndian.PutUint64(b[:], v); h.Write(b[:]) }
	h.Write(r.TxnID[:])
	put(uint64(r.Type))
	if r.Aborted {
		put(1)
	}
	for _, k := range r.Keys {
		h.Write([]byte(k.Key))
		h.Write([]byte(k.Entry.Owner))
		h.Write(k.Entry.TxnID[:])
		for _, v := range []uint64{uint64(k.Outcome), uint64(k.Entry.Extent.Bucket), uint64(k.Entry.Extent.Offset),
			uint64(k.Entry.Extent.Length), uint64(k.Entry.Size), k.Entry.Sum, k.Entry.Gen} {
			put(v)
		}
		if k.Shared {
			put(1)
		}
	}
	return h.Sum64(), fmt.Sprintf("type %d txn %x aborted %v, %d keys", r.Type, r.TxnID[:4], r.Aborted, len(r.Keys))
}
