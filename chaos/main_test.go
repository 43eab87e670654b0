//go:build chaos

package chaos

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed for randomized tiers (0 = time-based)")

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	flag.Parse()
	code := m.Run()
	fmt.Printf("chaos totals: %d crashes, %d recoveries, %d checks\n", totals.crashes, totals.recoveries, totals.checks)
	os.Exit(code)
}

var totals struct{ crashes, recoveries, checks int }

// testSeed returns the run's seed and logs a one-line reproduction command.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d; reproduce: go test -tags chaos ./chaos -run '^%s$' -seed %d", s, t.Name(), s)
	return s
}
