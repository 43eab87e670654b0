package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// Options are one seed's run. Zero fields take the defaults.
type Options struct {
	Seed uint64
	// Members is the cluster's size: 1 (or 0), the single node; 3 or 5, a cluster world
	// (cluster.go): Epochs rounds of Ops operations on one cluster whose members lose
	// power, restart and are cut off as the seed draws.
	Members int
	Epochs  int // worlds per seed, each ended by a power loss or a clean stop; default 8
	Ops     int // operations per world at most; default 40
	Keys    int // the key space; default 48
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
	CrashesByMode   map[string]int `json:"crashes_by_mode"`
	Faults          map[string]int `json:"faults"` // storage faults injected without a power loss
	Exits           int            `json:"exits"`  // restarts after a fail-stop or a recovery that gave up
	// Signatures counts, per persistence point signature (signature), the points passed;
	// Crashed, the power losses at one.
	Signatures map[string]int `json:"-"`
	Crashed    map[string]int `json:"-"`
	// ByMembers counts crash recoveries by the cluster size of their seed ("1", "3", "5");
	// a cluster member's power loss and recovery counts once.
	ByMembers   map[string]int `json:"crash_recoveries_by_members"`
	SeedsBySize map[string]int `json:"seeds_by_members"`
	LeaderKills int            `json:"leader_kills"` // cluster leaders' power failed between rounds
	Partitions  int            `json:"partitions"`   // network cuts (a side isolated or a link cut)
	Drops       int            `json:"network_drops"`
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
	s.LeaderKills += o.LeaderKills
	s.Partitions += o.Partitions
	s.Drops += o.Drops
	for _, m := range []struct {
		dst *map[string]int
		src map[string]int
	}{
		{&s.CrashesByPoint, o.CrashesByPoint}, {&s.CrashesByMode, o.CrashesByMode}, {&s.Signatures, o.Signatures}, {&s.Crashed, o.Crashed},
		{&s.Faults, o.Faults}, {&s.ByMembers, o.ByMembers}, {&s.SeedsBySize, o.SeedsBySize},
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
	Seed    uint64
	Members int    // Options.Members of the run (0 or 1: the single node)
	Focus   string // Options.Focus of the run
	Epoch   int    // the world that found it, from 0
	After   string // the power loss that preceded it ("raft #12", "sync #40"), or "start"
	Err     error
}

func (f *Failure) Error() string {
	focus := ""
	if f.Focus != "" {
		focus = fmt.Sprintf(" (focus %q)", f.Focus)
	}
	if f.Members > 1 {
		return fmt.Sprintf("seed %d, %d members, round %d: %v", f.Seed, f.Members, f.Epoch, f.Err)
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
		stats: Stats{Seeds: 1, CrashesByPoint: map[string]int{}, CrashesByMode: map[string]int{}, Signatures: map[string]int{}, Crashed: map[string]int{},
			Faults: map[string]int{}, ByMembers: map[string]int{}, SeedsBySize: map[string]int{}},
	}
	for i := range opt.Keys {
		s.keys = append(s.keys, fmt.Sprintf("k%02d/%d", i, keySize(i)))
	}
	var err error
	if opt.Members > 1 {
		s.stats.SeedsBySize[fmt.Sprint(opt.Members)]++
		err = s.runCluster(ctx)
	} else {
		s.stats.SeedsBySize["1"]++
		err = s.run(ctx)
	}
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
			s.stats.ByMembers["1"]++
			s.stats.CrashesByPoint[img.point]++
			s.stats.CrashesByMode[img.mode]++
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
