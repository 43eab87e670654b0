package bench

import (
	"bytes"
	"context"
	"encoding/json"
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
	var progress bytes.Buffer
	o.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	t.Log(buf.String())
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
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
