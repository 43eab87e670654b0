package sim

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// TestSeedReplays runs one seed twice on one P, as scripts/sim.sh runs seeds, and requires
// the same operations, answers and power losses in the same order: a failing seed replays.
//
// Asynchronous preemption switches goroutines at timer ticks of the machine, so it must be
// off (scripts/test.sh and scripts/sim.sh run with GODEBUG=asyncpreemptoff=1); the test
// skips itself otherwise.
func TestSeedReplays(t *testing.T) {
	if !strings.Contains(os.Getenv("GODEBUG"), "asyncpreemptoff=1") {
		t.Skip("needs GODEBUG=asyncpreemptoff=1 (scripts/test.sh runs it so)")
	}
	seed := testkit.Seed(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	run := func() []string {
		var lines []string
		opt := Options{Seed: seed, Trace: func(format string, args ...any) {
			lines = append(lines, fmt.Sprintf(format, args...))
		}}
		synctest.Test(t, func(*testing.T) {
			if _, err := Run(context.Background(), opt); err != nil {
				t.Errorf("seed %d: %v", seed, err)
			}
		})
		return lines
	}
	first, second := run(), run()
	if len(first) < 20 {
		t.Fatalf("seed %d traced only %d lines", seed, len(first))
	}
	if i := firstDiff(first, second); i >= 0 {
		t.Fatalf("seed %d: run 2 differs from run 1 at line %d of %d:\n  %s\n  %s", seed, i, len(first),
			at(first, i), at(second, i))
	}
}

func firstDiff(a, b []string) int {
	for i := range max(len(a), len(b)) {
		if at(a, i) != at(b, i) {
			return i
		}
	}
	return -1
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end)"
}
