package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// The local and the stream path serve clients in other processes (an engine's), so the bench
// drives them from a child process: this program re-executed with servedEnv set to a
// servedJob, as the start-up child is (startup.go). In the node's own process the client's
// goroutines would compete with the node's for the same Go Ps, which no engine does: with the
// client in-process, a 32-writer local-path offload spent 30 ms per batch in a precheck round
// trip whose handler took under 0.1 ms (docs/benchmarks.md, 2026-12-02).
const (
	servedEnv  = "KVOFFLOAD_BENCH_SERVED" // a servedJob, JSON
	servedRate = "rate "                  // the child's result line: this, then a Rate as JSON
)

// servedJob is one run of a served-path child: the offload of Load, or the read of its keys
// (every key once, Readers x Batch, shuffled by Load.Seed), through a client of Addr.
type servedJob struct {
	Addr    string `json:"addr"`
	Get     bool   `json:"get"`
	Load    Load   `json:"load"`
	Readers int    `json:"readers,omitempty"`
	Batch   int    `json:"batch,omitempty"`
}

// servedChild runs the job in os.Getenv(servedEnv) and prints its Rate; the exit status is
// non-zero on any error (printed to stderr).
func servedChild(spec string) int {
	var j servedJob
	if err := json.Unmarshal([]byte(spec), &j); err != nil {
		fmt.Fprintln(os.Stderr, "bench served child:", err)
		return 2
	}
	ctx := context.Background()
	cs, err := dialStore(ctx, j.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench served child: dial:", err)
		return 3
	}
	defer cs.Close()
	var r Rate
	if j.Get {
		r, err = readAll(ctx, cs, read{Keys: j.Load.keys(), Readers: j.Readers, Batch: j.Batch, Seed: j.Load.Seed})
	} else {
		r, err = Offload(ctx, cs, j.Load)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench served child:", err)
		return 4
	}
	out, err := json.Marshal(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench served child: the rate:", err)
		return 5
	}
	fmt.Printf("%s%s\n", servedRate, out)
	return 0
}

// runServed runs j in a child process and returns the Rate it measured.
func runServed(ctx context.Context, j servedJob) (Rate, error) {
	exe, err := os.Executable()
	if err != nil {
		return Rate{}, fmt.Errorf("bench: the served-path client needs this program's path: %w", err)
	}
	spec, err := json.Marshal(j)
	if err != nil {
		return Rate{}, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), servedEnv+"="+string(spec))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Rate{}, fmt.Errorf("bench: served-path client (%s): %w: %s", j.Addr, err, lastLine(stderr.String()))
	}
	line := lastLine(string(out))
	body, ok := strings.CutPrefix(line, servedRate)
	var r Rate
	if !ok {
		return Rate{}, fmt.Errorf("bench: served-path client printed %q, not a rate", line)
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return Rate{}, fmt.Errorf("bench: served-path client's rate %q: %w", body, err)
	}
	return r, nil
}
