package sim

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// TestClusterSeed runs one seed on a cluster of three and of five members, and requires
// no violation, power losses with recoveries, and every member's checks run.
func TestClusterSeed(t *testing.T) {
	seed := testkit.Seed(t)
	for _, n := range []int{3, 5} {
		var st Stats
		var err error
		opt := Options{Seed: seed, Members: n}
		if *simTrace {
			opt.Trace = t.Logf
		}
		synctest.Test(t, func(*testing.T) { st, err = Run(context.Background(), opt) })
		if err != nil {
			t.Fatalf("%d members: %v\nreplay: scripts/sim.sh --seed %d --members %d", n, err, seed, n)
		}
		t.Logf("%d members: %d crash recoveries, %d invariant checks, %d leader kills, %d partitions, %d drops, faults %v",
			n, st.CrashRecoveries, st.InvariantChecks, st.LeaderKills, st.Partitions, st.Drops, st.Faults)
		if st.CrashRecoveries == 0 || st.InvariantChecks == 0 {
			t.Errorf("%d members: %d crash recoveries, %d checks; want some of each", n, st.CrashRecoveries, st.InvariantChecks)
		}
	}
}
