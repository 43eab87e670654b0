package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/mutant"
)

// A tier is one `go test -tags chaos` run the mutation check may use to catch a mutant.
type tier struct {
	pkg string // relative to the module root
	run string // -run pattern
}

// mutantTiers are tried in order, cheapest first; a mutant is caught by the first that fails.
var mutantTiers = []tier{
	{"./bucketstore", "^(TestStoreCrash|TestStoreReadVerifies|TestDecodeRecordRejectsEveryBitFlip)$"},
	{"./fsm", "^TestPropertyLog$"},
	{"./wal", "^TestOpenRepairsTornTail$"},
	{"./node", "^(TestFailedRemoveFreesNothing|TestC11ExistsImpliesReadable|TestC12TornWALTail|TestC12BucketBitFlip)$"},
	{"./chaos", "^TestPowerLossAtEveryStep$"},
}

// mutants are the planted bugs of internal/mutant, in the order they are checked.
var mutants = []string{
	mutant.SkipBucketSync, mutant.CommitBeforeSync, mutant.SkipReadVerify, mutant.SkipDirSync,
	mutant.AcceptTornWAL, mutant.DoubleApply, mutant.FreeBeforeRemove,
}

// TestMutants is the mutation check: it proves the suite is not vacuous by planting one
// known bug at a time (internal/mutant, selected by KVOFFLOAD_MUTANT in a -tags chaos build)
// and requiring some tier to fail. The tiers must pass without a mutant first, or a failure
// would prove nothing. It runs `go test` as subprocesses, so it needs no build tag itself.
// It runs only when named, from a plain build:
//
//	go test ./chaos -run TestMutants -v
//
// and skips itself otherwise (in `go test ./...`, in the chaos build, with -short), so CI runs
// it once, from its own line in scripts/test.sh.
func TestMutants(t *testing.T) {
	run := flag.Lookup("test.run")
	named := run != nil && strings.Contains(run.Value.String(), "TestMutants")
	if testing.Short() || failpoint.Enabled || !named {
		t.Skip("mutation check: run it by name from a plain build: go test ./chaos -run TestMutants -v")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("mutation check needs the go command: %v", err)
	}
	start := time.Now()
	for _, tr := range mutantTiers {
		if r := runTier(t, goBin, tr, ""); r.failed {
			t.Fatalf("baseline (no mutant): %s %s fails, so the mutation check would prove nothing; output tail:\n%s", tr.pkg, r.test, tail(r.out))
		}
	}
	t.Logf("baseline: every tier passes without a mutant (%s)", time.Since(start).Round(time.Second))

	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "mutant\tcaught by\tseconds")
	for _, m := range mutants {
		t.Run(m, func(t *testing.T) {
			began := time.Now()
			for _, tr := range mutantTiers {
				if r := runTier(t, goBin, tr, m); r.failed {
					secs := time.Since(began).Seconds()
					fmt.Fprintf(tw, "%s\t%s %s\t%.1f\n", m, tr.pkg, r.test, secs)
					t.Logf("caught by %s %s in %.1fs; reproduce: %s", tr.pkg, r.test, secs, r.cmd)
					return
				}
			}
			fmt.Fprintf(tw, "%s\tNOT CAUGHT\t%.1f\n", m, time.Since(began).Seconds())
			t.Errorf("mutant %s is not caught by any tier: the suite misses the bug it plants", m)
		})
	}
	tw.Flush()
	t.Logf("mutation check (%s):\n%s", time.Since(start).Round(time.Second), table.String())
}

type tierResult struct {
	failed bool
	test   string // the first failing (sub)test, or what else made the run fail
	out    string
	cmd    string // one line that reproduces the run
}

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// runTier runs one tier with the named mutant live ("" = none). A run that does not build or
// set up is a broken harness, not a catch: it stops the test.
func runTier(t *testing.T, goBin string, tr tier, name string) tierResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"test", "-tags", "chaos", "-count=1", "-timeout", "4m", "-run", tr.run, tr.pkg}
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = ".." // the module root
	cmd.Env = append(cleanEnv(), mutant.Env+"="+name)
	out, err := cmd.CombinedOutput()
	r := tierResult{out: string(out), cmd: fmt.Sprintf("%s=%s go test -tags chaos -count=1 -run '%s' %s", mutant.Env, name, tr.run, tr.pkg)}
	if err == nil {
		return r
	}
	if strings.Contains(r.out, "[build failed]") || strings.Contains(r.out, "[setup failed]") || ctx.Err() != nil {
		t.Fatalf("%s did not run (%v); output tail:\n%s", r.cmd, err, tail(r.out))
	}
	r.failed, r.test = true, firstFailure(r.out)
	return r
}

// firstFailure names the first failing leaf test in go test output (a parent fails with its
// subtests), or the panic if no test reported a failure.
func firstFailure(out string) string {
	var names []string
	for _, m := range failLine.FindAllStringSubmatch(out, -1) {
		names = append(names, m[1])
	}
	for _, n := range names {
		leaf := true
		for _, o := range names {
			if strings.HasPrefix(o, n+"/") {
				leaf = false
				break
			}
		}
		if leaf {
			return n
		}
	}
	if strings.Contains(out, "panic:") {
		return "(panic)"
	}
	return "(exit status)"
}

// cleanEnv is the environment without any failpoint or mutant settings of the parent.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, mutant.Env+"=") && !strings.HasPrefix(kv, "KVOFFLOAD_FAILPOINTS=") {
			env = append(env, kv)
		}
	}
	return env
}

// tail is the end of a long output, enough to show why a run failed.
func tail(out string) string {
	const keep = 4000
	if len(out) <= keep {
		return out
	}
	return "..." + out[len(out)-keep:]
}
