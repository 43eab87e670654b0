package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the smoke run (0: time-based)")

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
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun: go test ./workload/bench -run TestSmoke -seed %d)", seed, seed)
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
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Log("\n" + table.String())
}
