package sim

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvoffload/kvoffload/internal/mutant"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

var (
	simSeconds = flag.Duration("sim.time", 0, "TestSimulate: run fresh seeds for this long (0: -sim.seeds seeds)")
	simSeeds   = flag.Int("sim.seeds", 20, "TestSimulate: seeds to run when -sim.time and -sim.crashes are 0")
	simCrashes = flag.Int("sim.crashes", 0, "TestSimulate: run fresh seeds until this many crash recoveries (or -sim.time)")
	simJSON    = flag.String("sim.json", "", "TestSimulate: write the run's Stats as JSON to this file")
	simTrace   = flag.Bool("sim.trace", false, "TestSimulate: log every operation and power loss")
	simFocus   = flag.String("sim.focus", "", "TestSimulate: Options.Focus of every seed (replays a guided seed); off: coverage guidance")
	simMembers = flag.String("sim.members", "1",
		"TestSimulate: cluster sizes, seed i runs the (i mod n)-th (a size listed k times runs k times as often); e.g. 1,3,5")
)

// memberSizes parses -sim.members.
func memberSizes(t *testing.T) []int {
	var sizes []int
	for _, f := range strings.Split(*simMembers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n != 1 && n != 3 && n != 5 {
			t.Fatalf("-sim.members %q: each size is 1, 3 or 5", *simMembers)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// budgetSpent reports whether TestSimulate has run its flags' worth after seeds seeds,
// elapsed time and total counts.
func budgetSpent(seeds int, elapsed time.Duration, total Stats) bool {
	switch {
	case *simSeconds > 0 && elapsed >= *simSeconds:
		return true
	case *simCrashes > 0 && total.SeedsBySize["1"] > 0:
		return total.ByMembers["1"] >= *simCrashes
	case *simCrashes > 0:
		return total.CrashRecoveries >= *simCrashes
	default:
		return *simSeconds == 0 && seeds >= *simSeeds
	}
}

// TestSimulate runs seeds from testkit.Seed (one seed replays exactly that seed with
// -sim.seeds 1), each a chain of power losses and recoveries on a single node or a cluster
// (-sim.members), and fails on the first violated invariant with the command that replays
// its seed. -sim.crashes counts the single node's crash recoveries when single-node seeds
// run (cluster seeds run on top), else every crash recovery.
//
// Coverage guidance: every other seed is given the persistence point signature that has
// had the fewest power losses so far (of those passed), as its Options.Focus, so that rare
// points (a rename of a WAL copy during recovery, a directory sync) are crashed at too. The
// choice depends on the seeds before, so a failure prints the focus with its seed.
func TestSimulate(t *testing.T) {
	base := testkit.Seed(t)
	ctx := context.Background()
	start := time.Now()
	var total Stats
	total.CrashesByPoint = map[string]int{}
	sizes, singles := memberSizes(t), 0
	for i := 0; !budgetSpent(i, time.Since(start), total); i++ {
		seed := base + uint64(i)
		opt := Options{Seed: seed, Members: sizes[i%len(sizes)]}
		if opt.Members == 1 {
			opt.Focus = *simFocus
			if *simFocus == "" && singles%2 == 1 {
				opt.Focus = leastCrashed(total)
			}
			singles++
		}
		if *simTrace {
			opt.Trace = t.Logf
		}
		var st Stats
		var err error
		// In a synctest bubble, time is virtual: the coordinator's timers and the running
		// check's polling fire in an order fixed by the work, not by the machine's clock.
		synctest.Test(t, func(*testing.T) { st, err = Run(ctx, opt) })
		total.Add(st)
		var f *Failure
		if errors.As(err, &f) {
			focus := ""
			if f.Focus != "" {
				focus = fmt.Sprintf(" --focus '%s'", f.Focus)
			}
			env := ""
			if m := os.Getenv(mutant.Env); m != "" {
				env = mutant.Env + "=" + m + " "
			}
			members := ""
			if f.Members > 1 {
				members = fmt.Sprintf(" --members %d", f.Members)
			}
			t.Errorf("%v\nreplay: %sscripts/sim.sh --seed %d%s%s", f, env, f.Seed, focus, members)
			break
		}
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
	secs := time.Since(start).Seconds()
	out, _ := json.Marshal(struct {
		Stats
		SignaturesSeen    int     `json:"signatures_seen"`
		SignaturesCrashed int     `json:"signatures_crashed"`
		Seconds           float64 `json:"seconds"`
	}{total, len(total.Signatures), len(total.Crashed), float64(int(secs*10)) / 10})
	for _, sig := range slices.Sorted(maps.Keys(total.Signatures)) {
		if total.Crashed[sig] == 0 {
			t.Logf("never crashed at: %s (passed %d times)", sig, total.Signatures[sig])
		}
	}
	t.Logf("%s", out)
	if *simJSON != "" {
		if err := os.WriteFile(*simJSON, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Fprintln(os.Stderr, string(out))
}

// leastCrashed is the signature, of those passed, with the fewest power losses (the first
// by name of a tie); "" before any.
func leastCrashed(total Stats) string {
	best, fewest := "", -1
	for _, sig := range slices.Sorted(maps.Keys(total.Signatures)) {
		if n := total.Crashed[sig]; fewest < 0 || n < fewest {
			best, fewest = sig, n
		}
	}
	return best
}
