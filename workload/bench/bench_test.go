package bench

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

func TestMain(m *testing.M) {
	MaybeChild() // the start-up measurement re-executes this binary as its writer
	flag.Parse()
	os.Exit(m.Run())
}

// TestSmoke runs the whole bench in a tiny configuration (a few MB, one round) and checks
// that every figure of the JSON object is present and positive (pebble may be null).
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("the smoke run writes to the disk for several seconds")
	}
	seed := testkit.Seed(t)
	o := Options{Dir: t.TempDir(), Rounds: 1, Seed: seed,
		LimitBytes: 8 << 20, ReadFileBytes: 8 << 20, IOPSFileBytes: 4 << 20, IOPSOps: 1024,
		OffloadBytes: 8 << 20, Offload2MBytes: 16 << 20, SmallKeys: 1024, CommitKeys: 1024,
		StartupKeys: 2048, StartupValue: 1024, Writers: 32, PebbleNote: "not run in the smoke test"}
	rep, progress := runLogged(t, o)
	m := jsonOf(t, rep)
	for _, k := range requiredKeys {
		v, ok := m[k]
		switch {
		case !ok:
			t.Errorf("%s missing", k)
		case k == "pebble_mb_per_s" && v == nil:
		default:
			if f, isNum := v.(float64); !isNum || f <= 0 {
				t.Errorf("%s = %v, want a positive number", k, v)
			}
		}
	}
	if !rep.StartupCrashed {
		t.Errorf("the start-up writer was not killed: %v", rep.Notes)
	}
	for _, k := range []string{"limit_batch_p99_ms", "offload_p99_ratio"} {
		if f, _ := m[k].(float64); f <= 0 {
			t.Errorf("%s = %v, want a positive number", k, m[k])
		}
	}
	// The round's first write limit tries 1 and 8 in flight; the later ones run at its winner.
	var runs []string
	for _, line := range strings.Split(progress.String(), "\n") {
		if _, how, ok := strings.Cut(line, "limit: sequential write "); ok {
			runs = append(runs, how)
		}
	}
	first, rest := "", "the depth chosen at the round's start"
	if len(runs) > 0 {
		first = runs[0][strings.Index(runs[0], "(")+1 : strings.Index(runs[0], " in flight")]
	}
	for i, how := range runs {
		if i == 0 && !strings.Contains(how, "the better of 1 and 8") || i > 0 && !strings.Contains(how, "("+first+" in flight, "+rest) {
			t.Errorf("sequential-write limit %d of the round: %q, want the first to try 1 and 8 and the rest to run at its %s", i, how, first)
		}
	}
	if len(runs) < 3 {
		t.Errorf("%d sequential-write limits in the round, want at least 3", len(runs))
	}
	if got := strings.Count(progress.String(), ", client in another process: "); got != 2 {
		t.Errorf("%d served-path runs with the client in another process, want 2 (local and stream)", got)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Log("\n" + table.String())
}

// runLogged runs the bench with o, logs its progress lines and returns them with its report.
func runLogged(t *testing.T, o Options) (Report, *bytes.Buffer) {
	t.Helper()
	var progress bytes.Buffer
	o.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	return rep, &progress
}

// TestServedChildFailure: a served-path client that cannot reach its node fails the run with
// the child's own reason, not a hang or a zero rate.
func TestServedChildFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sock := filepath.Join(t.TempDir(), "no-node")
	_, err := runServed(ctx, servedJob{Addr: "unix://" + sock, Load: Load{Prefix: "x", Keys: 16, Value: 4096, Writers: 1, Batch: 16, Seed: 1}})
	if err == nil || !strings.Contains(err.Error(), "served-path client") || !strings.Contains(err.Error(), "served child") {
		t.Fatalf("runServed against no node: %v, want the child's error", err)
	}
}

// TestChildNeedsNoArguments: the child variables act only on a process started with no
// arguments, as the bench starts its children, so a variable left in a shell does not turn
// another command into a bench child (here: this test binary, run for no test, exits 0
// instead of 2 for a garbled job).
func TestChildNeedsNoArguments(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), servedEnv+"=garbled")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("with %s set and an argument: %v\n%s", servedEnv, err, out)
	}
}

// TestReplayPhase runs --only replay on the sample's first requests with small blocks: every
// store (embedded, local path, stream path) takes and reads back every key, each served path
// runs in a child process, and every replay figure of the report is positive.
func TestReplayPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("the replay phase runs four replays and two child processes")
	}
	opt := ReplayDefaults()
	opt.BlockSize, opt.Writers = 4096, 4
	o := Options{Dir: t.TempDir(), Rounds: 1, Only: OnlyReplay, Replay: opt, ReplayRequests: 8}
	rep, progress := runLogged(t, o)
	m := jsonOf(t, rep)
	for k, v := range m {
		if f, ok := v.(float64); strings.HasPrefix(k, "replay_") && (!ok || f <= 0) {
			t.Errorf("%s = %v, want a positive number", k, v)
		}
	}
	if m["only"] != OnlyReplay || m["replay_rounds"] != 1.0 || rep.StartupKeys != 0 || rep.OffloadMBPerS != 0 {
		t.Errorf("only %v, replay rounds %v, start-up keys %d, offload %v: want the replay phase alone, once", m["only"], m["replay_rounds"], rep.StartupKeys, rep.OffloadMBPerS)
	}
	if got := strings.Count(progress.String(), ", client in another process: "); got != 2 {
		t.Errorf("%d served replays with the client in another process, want 2 (local and stream)", got)
	}
}

func TestValidateOnly(t *testing.T) {
	o := Quick(t.TempDir())
	for _, c := range []struct {
		only   string
		rounds int
		ok     bool
	}{{"", 1, true}, {OnlyReplay, 0, true}, {"offload", 1, false}} {
		o.Only, o.ReplayRounds = c.only, c.rounds
		if err := o.Validate(); (err == nil) != c.ok {
			t.Errorf("only %q, replay rounds %d: %v, want ok %v", c.only, c.rounds, err, c.ok)
		}
	}
	o = Options{Rounds: 1, Only: OnlyReplay} // no sizes: the replay phase needs none, but its options
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "replay needs writers") {
		t.Errorf("only replay without replay options: %v, want the replay's writers named", err)
	}
}
