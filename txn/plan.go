package txn

import (
	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/mutant"
)

// plan is step S0 of one transaction: what each input object becomes.
type plan struct {
	id      fsm.TxnID
	results []kvoffload.KeyResult // one per input object, in input order
	writes  []*write              // keys this transaction writes
	joins   []joinRef             // keys in flight in another transaction
	dups    []dupRef              // repeats of a key earlier in the same batch
	err     error                 // request-level outcome (ErrIndeterminate)
}

// write is one key this transaction writes.
type write struct {
	idx   int
	key   string
	value []byte
	sum   uint64
	gen   uint64
	ext   bucketstore.Extent
	fl    *flight
	err   error   // the record could not be written: this key fails, its siblings go on
	v     verdict // set when the write ends (resolve.go)
}

type joinRef struct {
	idx  int
	fl   *flight
	sum  uint64
	size uint32
}

type dupRef struct{ idx, first int }

// entry is the metadata entry w writes (Owner and TxnID are the transaction's).
func (w *write) entry() fsm.Entry {
	return fsm.Entry{Key: w.key, Extent: w.ext, Size: uint32(len(w.value)), Sum: w.sum, Gen: w.gen}
}

// plan classifies every object of b, whose keys lookUp has read. The caller holds
// c.inflight.mu, as it did for lookUp: the FSM and the in-flight table together decide each
// key's state, so a key is never both unclaimed and being written.
func (c *Coordinator) plan(id fsm.TxnID, b *batch) *plan {
	p := &plan{id: id, results: make([]kvoffload.KeyResult, len(b.objs))}
	for i, o := range b.objs {
		r := &p.results[i]
		r.Key = o.Key
		k := &b.keys[i]
		sum, size := b.sums[i], b.size(i)
		switch {
		case k.answered():
			k.v.set(r)
		case k.first != i:
			p.dups = append(p.dups, dupRef{idx: i, first: k.first})
		case k.live:
			compare(k.entry, sum, size).set(r)
			if mutant.On(mutant.PhantomRecord) && k.entry.Owner == c.cfg.NodeID { // mutation test only
				_ = c.data.Free(k.entry.Extent) // a duplicate's clean-up frees the live copy's bytes
			}
		case c.inflight.flights[o.Key] != nil:
			p.joins = append(p.joins, joinRef{idx: i, fl: c.inflight.flights[o.Key], sum: sum, size: size})
		default:
			fl := &flight{done: make(chan struct{}), sum: sum, size: size}
			c.inflight.flights[o.Key] = fl
			p.writes = append(p.writes, &write{idx: i, key: o.Key, value: o.Value, sum: sum, gen: k.gen + 1, fl: fl})
		}
	}
	return p
}

// repeated is the result of a key repeated in a batch with the bytes of its first copy, whose
// result is first: stored once, so the repeat is AlreadyStored.
func repeated(first kvoffload.KeyResult) kvoffload.KeyResult {
	if first.Outcome.OK() {
		alreadyStored.set(&first)
	}
	first.Joined = false
	return first
}

// compare says what offloading bytes with (sum, size) means for a committed entry.
func compare(e fsm.Entry, sum uint64, size uint32) verdict {
	if e.Sum == sum && e.Size == size {
		return alreadyStored
	}
	return mismatch
}
