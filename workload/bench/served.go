package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/kvoffload/kvoffload/workload/replay"
)

// The local and the stream path serve clients in other processes (an engine's), so the bench
// drives them from a child process: this program re-executed with servedEnv set to a
// servedJob, as the start-up child is (startup.go). In the node's own process the client's
// goroutines would compete with the node's for the same Go Ps, which no engine does: with the
// client in-process, a 32-writer local-path offload spent 30 ms per batch in a precheck round
// trip whose handler took under 0.1 ms (docs/benchmarks.md, 2026-12-02).
const (
	servedEnv    = "KVOFFLOAD_BENCH_SERVED" // a servedJob, JSON
	servedRate   = "rate "                  // the child's result line: this, then a Rate as JSON
	servedReplay = "replay "                // a replay's result line: this, then a replay.Summary as JSON
)

// servedJob is one run of a served-path child, through a client of Addr: the offload of Load,
// or the read of its keys (every key once, Readers x Batch, shuffled by Load.Seed), or, with
// Replay set, the replay of the replay phase's trace (its first Requests requests: replayTrace).
type servedJob struct {
	Addr     string          `json:"addr"`
	Get      bool            `json:"get"`
	Load     Load            `json:"load"`
	Readers  int             `json:"readers,omitempty"`
	Batch    int             `json:"batch,omitempty"`
	Replay   *replay.Options `json:"replay,omitempty"` // Progress nil: the child prints only its result
	Requests int             `json:"requests,omitempty"`
}

// servedChild runs the job in os.Getenv(servedEnv) and prints its result (a Rate, or a
// replay's Summary); the exit status is non-zero on any error (printed to stderr).
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
	var result any
	prefix := servedRate
	switch {
	case j.Replay != nil:
		opt := *j.Replay
		opt.Progress = nil
		reqs := replayTrace(j.Requests)
		// On the local path the payloads live in a registered region, as an engine's pool does.
		pool, release, perr := RegionPool(cs.c, reqs, opt)
		if perr != nil {
			fmt.Fprintln(os.Stderr, "bench served child:", perr)
			return 4
		}
		defer release()
		opt.Pool = pool
		// A replay that stopped or lost keys prints its Summary too: the bench names the problem.
		result, err = replay.Run(ctx, cs.target(), reqs, opt)
		prefix = servedReplay
	case j.Get:
		result, err = readAll(ctx, cs, read{Keys: j.Load.keys(), Readers: j.Readers, Batch: j.Batch, Seed: j.Load.Seed})
	default:
		result, err = Offload(ctx, cs, j.Load)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench served child:", err)
		return 4
	}
	out, err := json.Marshal(result)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench served child: the result:", err)
		return 5
	}
	fmt.Printf("%s%s\n", prefix, out)
	return 0
}

// runServed runs j in a child process and returns the Rate it measured.
func runServed(ctx context.Context, j servedJob) (Rate, error) {
	var r Rate
	err := execServed(ctx, j, servedRate, &r)
	return r, err
}

// runServedReplay runs j (a replay: j.Replay set) in a child process and returns its Summary.
func runServedReplay(ctx context.Context, j servedJob) (replay.Summary, error) {
	var s replay.Summary
	err := execServed(ctx, j, servedReplay, &s)
	return s, err
}

// execServed runs j in a child process and decodes into result the JSON after prefix on the
// last line the child printed.
func execServed(ctx context.Context, j servedJob, prefix string, result any) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: the served-path client needs this program's path: %w", err)
	}
	spec, err := json.Marshal(j)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), servedEnv+"="+string(spec))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("bench: served-path client (%s): %w: %s", j.Addr, err, lastLine(stderr.String()))
	}
	line := lastLine(string(out))
	body, ok := strings.CutPrefix(line, prefix)
	if !ok {
		return fmt.Errorf("bench: served-path client printed %q, not a line starting %q", line, prefix)
	}
	if err := json.Unmarshal([]byte(body), result); err != nil {
		return fmt.Errorf("bench: served-path client's result %q: %w", body, err)
	}
	return nil
}
