//go:build chaos

package chaos

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/internal/failpoint"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	if os.Getenv(localClientEnv) != "" {
		os.Exit(localClientMain())
	}
	if os.Getenv(memberEnv) != "" {
		os.Exit(memberMain())
	}
	flag.Parse()
	code := m.Run()
	if storenodeBin != "" {
		_ = os.RemoveAll(filepath.Dir(storenodeBin)) // the process tests' binary (procs_test.go)
	}
	fmt.Printf("chaos totals: %d crashes, %d recoveries, %d checks\n", totals.crashes, totals.recoveries, totals.checks)
	if err := checkCoverage(); err != nil {
		fmt.Println(err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// minFailpointHits is how often each failpoint in failpoint.All must be hit in this process
// during a full run.
const minFailpointHits = 3

// checkCoverage prints the failpoint hit table (in-process hits only: child and storenode
// processes count their own) and, when the full tier set ran, reports every failpoint of
// failpoint.All hit fewer than minFailpointHits times. The set counts as full when none of
// -run, -skip and -list was given; KVOFFLOAD_COVERAGE=1 forces the check (for a CI job that
// splits the tiers with -run but still runs them all in one process), KVOFFLOAD_COVERAGE=0
// turns it off.
func checkCoverage() error {
	fmt.Print("failpoint coverage (hits in this process):\n", failpoint.Coverage())
	env := os.Getenv("KVOFFLOAD_COVERAGE")
	partial := false
	for _, f := range []string{"test.run", "test.skip", "test.list"} {
		partial = partial || flag.Lookup(f).Value.String() != ""
	}
	if env == "0" || (env != "1" && partial) {
		return nil
	}
	hits := failpoint.Totals()
	var low []string
	for _, name := range failpoint.All {
		if hits[name] < minFailpointHits {
			low = append(low, fmt.Sprintf("%s (%d)", name, hits[name]))
		}
	}
	if len(low) > 0 {
		return fmt.Errorf("FAIL: failpoint coverage: hit fewer than %d times in process: %s",
			minFailpointHits, strings.Join(low, ", "))
	}
	return nil
}

var totals struct{ crashes, recoveries, checks int }
