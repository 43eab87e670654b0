package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/vfs/memfs"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// Options are one seed's run. Zero fields take the defaults.
type Options struct {
	Seed   uint64
	Epochs int // worlds per seed, each ended by a power loss or a clean stop; default 8
	Ops    int // operations per world at most; default 40
	Keys   int // the key space; default 48
	// Window bounds the persistence point a power loss strikes at, drawn uniformly from
	// [1, Window]; default 3*Ops (a world of 40 operations passes 110-150 points).
	Window int
	// Focus, if set, is a persistence point's signature (kind, file class and phase, as
	// "rename wal-segment-start @recovery"): each world's power fails at the first point
	// of it in the second half of the points before the drawn one, else at the drawn one.
	// Coverage guidance sets it.
	Focus string
	// Trace, if set, receives a line per operation and per power loss.
	Trace func(format string, args ...any)
}

func (o Options) withDefaults() Options {
	if o.Epochs == 0 {
		o.Epochs = 8
	}
	if o.Ops == 0 {
		o.Ops = 40
	}
	if o.Keys == 0 {
		o.Keys = 48
	}
	if o.Window == 0 {
		o.Window = 3 * o.Ops
	}
	return o
}

// Stats counts what a run did. Its JSON is the last line of scripts/sim.sh.
type Stats struct {
	Seeds           int            `json:"seeds"`
	CrashRecoveries int            `json:"crash_recoveries"`
	Restarts        int            `json:"restarts"`  // clean stops, then a recovery
	BitFlips        int            `json:"bit_flips"` // records damaged at rest
	InvariantChecks int            `json:"invariant_checks"`
	Violations      int            `json:"violations"`
	CrashesByPoint  map[string]int `json:"crashes_by_point"`
	Faults          map[string]int `json:"faults"` // storage faults injected without a power loss
	Exits           int            `json:"exits"`  // restarts after a fail-stop or a recovery that gave up
	// Signatures counts, per persistence point signature (signature), the points passed;
	// Crashed, the power losses at one.
	Signatures map[string]int `json:"-"`
	Crashed    map[string]int `json:"-"`
}

// Add adds o's counts to s.
func (s *Stats) Add(o Stats) {
	s.Seeds += o.Seeds
	s.CrashRecoveries += o.CrashRecoveries
	s.Restarts += o.Restarts
	s.BitFlips += o.BitFlips
	s.Exits += o.Exits
	s.InvariantChecks += o.InvariantChecks
	s.Violations += o.Violations
	for _, m := range []struct {
		dst *map[string]int
		src map[string]int
	}{
		{&s.CrashesByPoint, o.CrashesByPoint}, {&s.Signatures, o.Signatures}, {&s.Crashed, o.Crashed},
		{&s.Faults, o.Faults},
	} {
		if *m.dst == nil {
			*m.dst = map[string]int{}
		}
		for k, v := range m.src {
			(*m.dst)[k] += v
		}
	}
}

// Failure is a violated invariant (or a recovery that failed), with where it happened.
type Failure struct {
	Seed  uint64
	Focus string // Options.Focus of the run
	Epoch int    // the world that found it, from 0
	After string // the power loss that preceded it ("raft #12", "sync #40"), or "start"
	Err   error
}

func (f *Failure) Error() string {
	focus := ""
	if f.Focus != "" {
		focus = fmt.Sprintf(" (focus %q)", f.Focus)
	}
	return fmt.Sprintf("seed %d%s, world %d, after a power loss before %s: %v", f.Seed, focus, f.Epoch, f.After, f.Err)
}

func (f *Failure) Unwrap() error { return f.Err }

// sim is one seed's run.
type sim struct {
	opt      Options
	rng      *rand.Rand // the workload's choices
	crashRng *rand.Rand // the power losses' choices (under a disk's mu)
	keys     []string
	retry    *batch // an offload whose outcome was unknown, to retry with its txn ID
	stats    Stats
}

// Run runs one seed: a chain of opt.Epochs worlds, each recovered from the power loss that
// ended the last and checked. It returns the counts and the first *Failure.
func Run(ctx context.Context, opt Options) (Stats, error) {
	opt = opt.withDefaults()
	s := &sim{
		opt:      opt,
		rng:      rand.New(rand.NewPCG(opt.Seed, 1)),
		crashRng: rand.New(rand.NewPCG(opt.Seed, 2)),
		stats: Stats{Seeds: 1, CrashesByPoint: map[string]int{}, Signatures: map[string]int{}, Crashed: map[string]int{},
			Faults: map[string]int{}},
	}
	for i := range opt.Keys {
		s.keys = append(s.keys, fmt.Sprintf("k%02d/%d", i, keySize(i)))
	}
	err := s.run(ctx)
	if err != nil {
		s.stats.Violations++
	}
	return s.stats, err
}

// keySize is the payload size of key i: from part of a sector to several.
func keySize(i int) int { return [...]int{700, 4096, 5000, 12 << 10, 1}[i%5] }

func (s *sim) run(ctx context.Context) error {
	mem, log, m, after := memfs.New(), [][]byte(nil), newModel(), "start"
	exits := 0
	for epoch := 0; epoch <= s.opt.Epochs; epoch++ {
		last := epoch == s.opt.Epochs // the final world only recovers and is checked
		crashAt := 0
		if !last {
			crashAt = 1 + s.crashRng.IntN(s.opt.Window)
		}
		d := newDisk(mem, log, m, crashAt, s)
		fail := func(err error) error {
			return &Failure{Seed: s.opt.Seed, Focus: s.opt.Focus, Epoch: epoch, After: after, Err: err}
		}
		w, err := openWorld(ctx, d)
		if err == nil {
			var checks int
			checks, err = s.check(w.ctx, w)
			s.stats.InvariantChecks += checks
			if err != nil {
				w.close()
				return fail(err)
			}
			if !last {
				err = s.drive(w.ctx, w)
			}
			w.close()
		}
		for sig, n := range d.seen {
			s.stats.Signatures[sig] += n
		}
		for kind, n := range d.faults {
			s.stats.Faults[kind] += n
		}
		if d.img != nil {
			s.trace("power loss before %s #%d (%s)", d.img.point, d.img.n, d.img.sig)
			s.stats.Crashed[d.img.sig]++
		}
		switch img := d.img; {
		case img != nil: // the power failed: the next world recovers from what it left
			mem, log, m = img.fs, img.log, img.model
			if s.crashRng.IntN(flipOdds) == 0 {
				if err := s.flipBit(mem, log, m); err != nil {
					return fail(err)
				}
			}
			after = fmt.Sprintf("%s #%d", img.point, img.n)
			s.stats.CrashRecoveries++
			s.stats.CrashesByPoint[img.point]++
		case err != nil && !isViolation(err) && exits < maxExits &&
			(errors.Is(err, errAnswerLost) || errors.Is(err, errFailStopped) || faulted(d)):
			// The node exits and is restarted: recovery gave up when a proposal's answer was
			// lost or a storage fault struck it, or the node fail-stopped on one. The process
			// ends; the disk keeps even what was not synced.
			exits++
			log, after = d.log, fmt.Sprintf("an exit (%v)", err)
			s.stats.Exits++
			if !errors.Is(err, errFailStopped) {
				epoch--
			}
		case err != nil:
			return fail(err)
		default: // a clean stop: it must lose nothing either
			mem, log, after = mem.Crash(memfs.CrashDropAll, nil), d.log, "a clean stop"
			s.stats.Restarts++
		}
	}
	return nil
}

// flipOdds: one power loss in this many also flips a bit of a stored record at rest.
const flipOdds = 4

// flipBit flips one bit of the record of a key m holds present, in the disk a power loss
// left, and marks the key damaged: it may then read Corrupt or NotFound, never wrong bytes.
func (s *sim) flipBit(mem *memfs.FS, log [][]byte, m *model) error {
	f := fsm.New()
	for i, cmd := range log {
		f.ApplyCommand(uint64(i+1), cmd)
	}
	var live []fsm.Entry
	for _, k := range s.keys {
		if e, ok := f.Lookup(k); ok && m.keys[k] == present {
			live = append(live, e)
		}
	}
	if len(live) == 0 {
		return nil
	}
	e := live[s.crashRng.IntN(len(live))]
	// Bucket files are named as bucketstore/bucket.go's bucketName does (on-disk format).
	name := fmt.Sprintf("%s/bucket-%010d.kvb", bucketDir, e.Extent.Bucket)
	file, err := mem.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("flip a bit of %s: %w", e.Key, err)
	}
	defer file.Close()
	off := e.Extent.Offset + s.crashRng.Int64N(e.Extent.Length)
	b := make([]byte, 1)
	if _, err := file.ReadAt(b, off); err != nil {
		return fmt.Errorf("flip a bit of %s: %w", e.Key, err)
	}
	b[0] ^= 1 << s.crashRng.IntN(8)
	if _, err := file.WriteAt(b, off); err != nil {
		return fmt.Errorf("flip a bit of %s: %w", e.Key, err)
	}
	if err := file.Sync(); err != nil {
		return fmt.Errorf("flip a bit of %s: %w", e.Key, err)
	}
	m.keys[e.Key] = damaged
	s.stats.BitFlips++
	s.trace("bit flipped in %s at %d", e.Key, off)
	return nil
}

// errFailStopped ends a world whose node fail-stopped (a storage fault).
var errFailStopped = errors.New("sim: the node fail-stopped")

// isViolation reports whether err holds a violated invariant.
func isViolation(err error) bool {
	var v violation
	return errors.As(err, &v)
}

// faulted reports whether d injected a storage fault.
func faulted(d *disk) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.faults) > 0
}

// maxExits bounds the recoveries per seed that may end in an exit (errAnswerLost).
const maxExits = 16

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
			b.decided = make([]int, len(b.keys))
			for i, k := range b.keys {
				b.decided[i] = w.disk.model.decided[k]
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

// read reads 1-8 keys and checks each answer against the model.
func (s *sim) read(ctx context.Context, w *world) error {
	keys := s.pick(1 + s.rng.IntN(8))
	res, err := w.coord.BatchGet(ctx, keys)
	if err != nil {
		return nil
	}
	w.disk.mu.Lock()
	defer w.disk.mu.Unlock()
	var errs []error
	for _, r := range res {
		if err := s.judge(r, w.disk.model.keys[r.Key]); err != nil {
			errs = append(errs, err)
		}
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
