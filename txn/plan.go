package txn

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
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
	idx     int
	key     string
	value   []byte
	sum     uint64
	gen     uint64
	ext     bucketstore.Extent
	fl      *flight
	err     error // the record could not be written: this key fails, its siblings go on
	outcome kvoffload.Outcome
	code    kvoffload.Code
	reason  string
}

type joinRef struct {
	idx  int
	fl   *flight
	sum  uint64
	size uint32
}

type dupRef struct{ idx, first int }

func (w *write) header(id fsm.TxnID) bucketstore.Header {
	return bucketstore.Header{Key: w.key, TxnID: id, Generation: w.gen, PayloadLen: uint32(len(w.value)), PayloadSum: w.sum}
}

func (w *write) entry() intentEntry {
	return intentEntry{Key: w.key, Bucket: w.ext.Bucket, Offset: w.ext.Offset, Length: w.ext.Length,
		Size: uint32(len(w.value)), Sum: w.sum, Gen: w.gen}
}

// checksums returns the xxhash64 of every value: computed once per call, it is both the
// batch's signature and each record's PayloadSum.
func checksums(objs []kvoffload.Object) []uint64 {
	sums := make([]uint64, len(objs))
	for i, o := range objs {
		sums[i] = xxhash.Sum64(o.Value)
	}
	return sums
}

// signature identifies a batch by its keys, value lengths and value checksums, so a call that
// reuses a running call's txn ID for a different batch is refused instead of being handed its
// results.
func signature(objs []kvoffload.Object, sums []uint64) uint64 {
	d := xxhash.New()
	var n [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(n[:], v)
		_, _ = d.Write(n[:])
	}
	for i, o := range objs {
		put(uint64(len(o.Key))) // length-prefixed: no two key lists hash the same bytes
		_, _ = d.WriteString(o.Key)
		put(uint64(len(o.Value)))
		put(sums[i])
	}
	return d.Sum64()
}

// checkBatch enforces the per-request limits.
func (c *Coordinator) checkBatch(objs []kvoffload.Object) error {
	if len(objs) > c.cfg.MaxBatchKeys {
		return BatchKeysError(uint64(len(objs)), objs[c.cfg.MaxBatchKeys].Key, c.cfg.MaxBatchKeys)
	}
	var total int64
	over := -1 // the object at which the total first went over
	for i, o := range objs {
		if total += int64(len(o.Value)); total > c.cfg.MaxBatchBytes && over < 0 {
			over = i
		}
	}
	if over >= 0 {
		return BatchBytesError(uint64(total), objs[over].Key, c.cfg.MaxBatchBytes)
	}
	return nil
}

// invalid returns why o is refused (its code and reason), or CodeNone.
func (c *Coordinator) invalid(o kvoffload.Object) (kvoffload.Code, string) {
	if why := c.invalidKey(o.Key); why != "" {
		return kvoffload.CodeInvalidKey, why
	}
	switch {
	case len(o.Value) == 0:
		return kvoffload.CodeInvalidValue, "invalid value: empty"
	case int64(len(o.Value)) > c.cfg.MaxObjectBytes:
		return kvoffload.CodeTooLarge, ObjectTooLarge(uint64(len(o.Value)), c.cfg.MaxObjectBytes)
	}
	return kvoffload.CodeNone, ""
}

// invalidKey returns why key can never be stored, or "".
func (c *Coordinator) invalidKey(key string) string {
	switch {
	case key == "":
		return "invalid key: empty"
	case len(key) > c.cfg.MaxKeyBytes:
		return fmt.Sprintf("invalid key: %d bytes exceeds the limit of %d", len(key), c.cfg.MaxKeyBytes)
	case !utf8.ValidString(key):
		return "invalid key: not valid UTF-8"
	}
	for i, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Sprintf("invalid key: control character at byte %d", i)
		}
	}
	return ""
}

// plan classifies every object (sums[i] is the xxhash64 of objs[i].Value). Under
// c.inflight.mu the FSM and the in-flight table together decide each key's state, so a key is
// never both unclaimed and being written.
func (c *Coordinator) plan(id fsm.TxnID, objs []kvoffload.Object, sums []uint64) *plan {
	p := &plan{id: id, results: make([]kvoffload.KeyResult, len(objs))}
	c.inflight.mu.Lock()
	defer c.inflight.mu.Unlock()
	first := make(map[string]int, len(objs))
	for i, o := range objs {
		r := &p.results[i]
		r.Key = o.Key
		if code, reason := c.invalid(o); code != kvoffload.CodeNone {
			r.Outcome, r.Code, r.Reason = kvoffload.Rejected, code, reason
			continue
		}
		size := uint32(len(o.Value))
		if j, ok := first[o.Key]; ok {
			if sameBytes(objs, sums, i, j) {
				p.dups = append(p.dups, dupRef{idx: i, first: j})
			} else {
				r.Outcome, r.Code, r.Reason = kvoffload.Conflict, kvoffload.CodeDuplicateKey, dupConflict
			}
			continue
		}
		first[o.Key] = i
		if e, ok := c.meta.Lookup(o.Key); ok {
			r.Outcome, r.Code, r.Reason = compare(e, sums[i], size)
			continue
		}
		if fl, ok := c.inflight.flights[o.Key]; ok {
			p.joins = append(p.joins, joinRef{idx: i, fl: fl, sum: sums[i], size: size})
			continue
		}
		fl := &flight{done: make(chan struct{}), sum: sums[i], size: size}
		c.inflight.flights[o.Key] = fl
		p.writes = append(p.writes, &write{idx: i, key: o.Key, value: o.Value, sum: sums[i],
			gen: c.meta.Generation(o.Key) + 1, fl: fl})
	}
	return p
}

// dupConflict is the reason of a key repeated in a batch with other bytes than its first copy.
const dupConflict = "the batch holds this key twice with different bytes"

// sameBytes reports whether objs[i] and objs[j] hold the same value (length and checksum).
func sameBytes(objs []kvoffload.Object, sums []uint64, i, j int) bool {
	return sums[i] == sums[j] && len(objs[i].Value) == len(objs[j].Value)
}

// repeated is the result of a key repeated in a batch with the bytes of its first copy, whose
// result is first: stored once, so the repeat is AlreadyStored.
func repeated(first kvoffload.KeyResult) kvoffload.KeyResult {
	if first.Outcome.OK() {
		first.Outcome, first.Code, first.Reason = kvoffload.AlreadyStored, kvoffload.CodeNone, ""
	}
	first.Joined = false
	return first
}

// compare says what offloading bytes with (sum, size) means for a committed entry.
func compare(e fsm.Entry, sum uint64, size uint32) (kvoffload.Outcome, kvoffload.Code, string) {
	if e.Sum == sum && e.Size == size {
		return kvoffload.AlreadyStored, kvoffload.CodeNone, ""
	}
	return kvoffload.Conflict, kvoffload.CodeMismatch, "committed with different bytes"
}

// finish completes the flights of ws with their outcomes and records their results.
func (c *Coordinator) finish(p *plan, ws []*write) {
	c.inflight.mu.Lock()
	defer c.inflight.mu.Unlock()
	for _, w := range ws {
		if c.inflight.flights[w.key] == w.fl {
			delete(c.inflight.flights, w.key)
		}
		w.fl.outcome, w.fl.code, w.fl.reason = w.outcome, w.code, w.reason
		close(w.fl.done)
		r := &p.results[w.idx]
		r.Outcome, r.Code, r.Reason = w.outcome, w.code, w.reason
	}
}
