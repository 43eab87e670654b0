package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// The workload: what a client of the node does between power losses, and the model of
// what it was told.

// drive runs up to opt.Ops operations on w, until its power fails. An error other than the
// power's is a failure.
func (s *sim) drive(ctx context.Context, w *world) error {
	for i := range s.opt.Ops {
		if w.disk.powerOff() {
			return nil
		}
		if i == s.opt.Ops/2 {
			checks, err := s.checkRunning(w)
			s.stats.InvariantChecks += checks
			if err != nil {
				return err
			}
		}
		var err error
		switch r := s.rng.IntN(10); {
		case r < 7:
			err = s.offload(ctx, w)
		case r < 9:
			err = s.remove(ctx, w)
		default:
			err = s.read(ctx, w)
		}
		if err != nil && !w.disk.powerOff() {
			return err
		}
		if w.coord.Usable() != nil && !w.disk.powerOff() {
			return errFailStopped
		}
	}
	return nil
}

// pick returns n distinct keys of the key space.
func (s *sim) pick(n int) []string {
	out := make([]string, 0, n)
	for len(out) < n {
		k := s.keys[s.rng.IntN(len(s.keys))]
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

func (s *sim) txnID() fsm.TxnID {
	var id fsm.TxnID
	for i := range id {
		id[i] = byte(s.rng.IntN(256))
	}
	return id
}

// offload offloads 1-6 keys in one transaction. A batch whose outcome was unknown is
// retried with its txn ID as a client does (kvoffload.ErrIndeterminate), in a later world
// too, half the time before any new batch.
func (s *sim) offload(ctx context.Context, w *world) error {
	b := s.retry
	if b == nil || s.rng.IntN(2) == 0 {
		keys := s.pick(1 + s.rng.IntN(6))
		b = &batch{id: s.txnID(), keys: keys}
	} else if s.rng.IntN(2) == 0 {
		// Another client removes a key of the batch before the retry: the retry must not
		// bring it back (its answer is its first attempt's).
		if err := s.removeKeys(ctx, w, b.keys[:1]); err != nil || w.disk.powerOff() {
			return err
		}
	}
	s.retry = nil
	objs := make([]kvoffload.Object, len(b.keys))
	for i, k := range b.keys {
		objs[i] = kvoffload.Object{Key: k, Value: s.payload(k)}
	}
	w.begin(b.keys)
	res, err := w.coord.BatchOffload(ctx, b.id, objs)
	s.trace("offload %x %v: %v %v", b.id[:4], b.keys, outcomes(res), err)
	if err != nil {
		w.fail(b.keys)
		if errors.Is(err, txn.ErrIndeterminate) {
			w.disk.mu.Lock()
			if b.decided == nil { // the first attempt's: a retry that fails again keeps it
				b.decided = make([]int, len(b.keys))
				for i, k := range b.keys {
					b.decided[i] = w.disk.model.decided[k]
				}
			}
			w.disk.mu.Unlock()
			s.retry = b
		}
		return nil // an offload may fail (power, space): its keys are uncertain
	}
	states := make([]keyState, len(b.keys))
	w.disk.mu.Lock()
	for i, r := range res {
		k := b.keys[i]
		switch {
		case b.decided != nil && w.disk.model.decided[k] != b.decided[i]:
			// A retry answers as its first attempt did, which took effect (if at all)
			// before the operations that ended on k since: they decide k.
			states[i] = w.disk.model.keys[k]
		case r.Outcome.OK() && w.disk.model.keys[k] == damaged && (b.decided != nil || r.Outcome != kvoffload.Stored):
			// AlreadyStored, or a retry answering its first attempt's Stored, names the record
			// a bit flip damaged at rest: only a new record (a fresh Stored) repairs the key.
			states[i] = damaged
		case r.Outcome.OK():
			states[i] = present
		default: // not stored: the key keeps its state
			states[i] = w.disk.model.keys[k]
		}
	}
	w.disk.mu.Unlock()
	w.end(b.keys, states)
	return nil
}

// batch is an offload a client may retry.
type batch struct {
	id      fsm.TxnID
	keys    []string
	decided []int // per key, model.decided when the first attempt failed; nil: a first attempt
}

// remove removes 1-3 keys.
func (s *sim) remove(ctx context.Context, w *world) error {
	return s.removeKeys(ctx, w, s.pick(1+s.rng.IntN(3)))
}

// removeKeys removes keys in one transaction.
func (s *sim) removeKeys(ctx context.Context, w *world, keys []string) error {
	w.begin(keys)
	res, err := w.coord.RemoveTxn(ctx, s.txnID(), keys)
	s.trace("remove %v: %v %v", keys, res, err)
	if err != nil {
		w.fail(keys)
		return nil
	}
	w.disk.mu.Lock()
	var errs []error
	for _, r := range res {
		if !r.Removed && w.disk.model.keys[r.Key] == present {
			errs = append(errs, violation{"I2", r.Key, "stored and acknowledged, but Remove did not find it"})
		}
	}
	w.disk.mu.Unlock()
	w.end(keys, make([]keyState, len(keys))) // absent
	return errors.Join(errs...)
}

// read reads 1-8 keys and checks each answer against the model. Its bucket reads may fail
// with EIO or return a flipped bit (disk.readHook): a key whose read failed must read
// Unavailable (an error, not NotFound or bytes), one whose read was flipped must not read
// wrong bytes (the checksum catches it and the key is dropped: the hook marks it damaged),
// and the node must stay usable.
func (s *sim) read(ctx context.Context, w *world) error {
	keys := s.pick(1 + s.rng.IntN(8))
	w.disk.mu.Lock()
	w.disk.reading = true
	for _, k := range keys {
		if e, ok := w.f.Lookup(k); ok {
			w.disk.readKeys[readAt(bucketFile(e.Extent.Bucket), e.Extent.Offset)] = k
		}
	}
	w.disk.mu.Unlock()
	res, err := w.coord.BatchGet(ctx, keys)
	w.disk.mu.Lock()
	defer w.disk.mu.Unlock()
	faulted := map[string]string{} // key -> the fault its record's read met
	for at, kind := range w.disk.readFaults {
		if k := w.disk.readKeys[at]; k != "" {
			faulted[k] = kind
		}
	}
	w.disk.reading = false
	clear(w.disk.readKeys)
	clear(w.disk.readFaults)
	if err != nil {
		return nil
	}
	var errs []error
	for _, r := range res {
		switch kind := faulted[r.Key]; {
		case kind == "eio-bucket-read" && r.Status == kvoffload.Unavailable:
			continue
		case kind == "eio-bucket-read" && r.Status != kvoffload.Found:
			errs = append(errs, violation{"read-fault", r.Key, fmt.Sprintf("read EIO, answered %s (%s), want Unavailable", r.Status, r.Reason)})
			continue
		}
		if err := s.judge(r, w.disk.model.keys[r.Key]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(faulted) > 0 && w.coord.Usable() != nil && !w.disk.off {
		errs = append(errs, violation{"read-fault", "-", fmt.Sprintf("the node fail-stopped on a read fault: %v", w.coord.Usable())})
	}
	return errors.Join(errs...)
}

func (s *sim) payload(key string) []byte {
	var size int
	fmt.Sscanf(key[4:], "%d", &size)
	return trace.Payload(s.opt.Seed, key, size)
}

// judge checks one read of a key the model holds as st.
func (s *sim) judge(r kvoffload.GetResult, st keyState) error {
	switch {
	case r.Status == kvoffload.Found && !bytes.Equal(r.Value, s.payload(r.Key)):
		return violation{"I3", r.Key, fmt.Sprintf("read %d wrong bytes", len(r.Value))}
	case st == damaged:
		return nil // Found with its bytes, Corrupt, or NotFound (dropped by an earlier read)
	case st == present && r.Status != kvoffload.Found:
		return violation{"I2", r.Key, fmt.Sprintf("acknowledged stored, read %s (%s)", r.Status, r.Reason)}
	case st == absent && r.Status == kvoffload.Found:
		return violation{"resurrection", r.Key, "acknowledged removed (or never stored), read Found"}
	case r.Status != kvoffload.Found && r.Status != kvoffload.NotFound:
		return violation{"I3", r.Key, fmt.Sprintf("read %s (%s)", r.Status, r.Reason)}
	}
	return nil
}

func (w *world) begin(keys []string) {
	w.disk.mu.Lock()
	w.disk.model.begin(keys)
	w.disk.mu.Unlock()
}

func (w *world) fail(keys []string) {
	w.disk.mu.Lock()
	w.disk.model.fail(keys)
	w.disk.mu.Unlock()
}

func (w *world) end(keys []string, states []keyState) {
	w.disk.mu.Lock()
	w.disk.model.end(keys, states)
	w.disk.mu.Unlock()
}

func (s *sim) trace(format string, args ...any) {
	if s.opt.Trace != nil {
		s.opt.Trace(format, args...)
	}
}

func outcomes(res []kvoffload.KeyResult) []string {
	out := make([]string, len(res))
	for i, r := range res {
		out[i] = r.Outcome.String()
	}
	return out
}
