package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The start-up measurement writes N committed keys from a child process (this program
// re-executed with childEnv set), SIGKILLs the child once every key is acknowledged (no clean
// shutdown, no final snapshot: a crash), then times opening the node in this process. The
// same technique as the crash suite's child (chaos/child_test.go).
const (
	childEnv      = "KVOFFLOAD_BENCH_CHILD" // data directory
	childKeysEnv  = "KVOFFLOAD_BENCH_KEYS"
	childValueEnv = "KVOFFLOAD_BENCH_VALUE" // bytes
	childSeedEnv  = "KVOFFLOAD_BENCH_SEED"
	childReady    = "committed"
)

// MaybeChild runs the start-up child or a served-path client (served.go) and exits when this
// process was started as one (no arguments, and its environment names a data directory or a
// served job); otherwise it returns at once. A program that runs the
// bench calls it first thing in main (and a test binary in TestMain).
func MaybeChild() {
	if len(os.Args) > 1 {
		return // a child is started with no arguments: a variable left in a shell does not turn every subcommand into one
	}
	if spec := os.Getenv(servedEnv); spec != "" {
		os.Exit(servedChild(spec))
	}
	dir := os.Getenv(childEnv)
	if dir == "" {
		return
	}
	os.Exit(childMain(dir))
}

func childMain(dir string) int {
	keys, _ := strconv.Atoi(os.Getenv(childKeysEnv))
	value, _ := strconv.Atoi(os.Getenv(childValueEnv))
	seed, _ := strconv.ParseUint(os.Getenv(childSeedEnv), 10, 64)
	ctx := context.Background()
	s, err := openStore(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child: open:", err)
		return 3
	}
	if _, err := Offload(ctx, s, startupLoad(keys, value, seed)); err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 4
	}
	fmt.Printf("%s %d\n", childReady, keys)
	for {
		time.Sleep(time.Hour) // until killed
	}
}

func startupLoad(keys, value int, seed uint64) Load {
	return Load{Prefix: "startup", Keys: keys, Value: value, Writers: 32, Batch: 256, Seed: seed}
}

// startupResult is the start-up measurement.
type startupResult struct {
	Keys         int
	Bytes        int64 // payload bytes committed
	Open         time.Duration
	SnapshotOpen time.Duration // a second open, after the first one's node took a snapshot and closed
	Crashed      bool          // the writer was SIGKILLed (false: it closed cleanly; see Note)
	Note         string        // how the writer stopped, when not by SIGKILL
	HeapPerKey   float64
	RSSPerKey    float64
	HeapInuseKB  int64
}

// startup writes keys committed keys of value bytes into dir, crashes the writer, and times
// node.Open on dir; memory per key is the growth of the live Go heap (after a GC) from
// before the open to after it, divided by keys (VmRSS growth too, as a cross-check).
func startup(ctx context.Context, dir string, keys, value int, seed uint64) (startupResult, error) {
	res := startupResult{Keys: keys, Bytes: int64(keys) * int64(value)}
	err := crashWriter(ctx, dir, keys, value, seed)
	if err != nil {
		res.Note = fmt.Sprintf("no child process (%v): keys written in this process and closed cleanly", err)
		s, err := openStore(ctx, dir)
		if err != nil {
			return res, err
		}
		if _, err := Offload(ctx, s, startupLoad(keys, value, seed)); err != nil {
			_ = s.Close()
			return res, err
		}
		if err := s.Close(); err != nil {
			return res, err
		}
	} else {
		res.Crashed = true
	}
	heap0, rss0 := memNow()
	t0 := time.Now()
	s, err := openStore(ctx, dir)
	if err != nil {
		return res, fmt.Errorf("bench: start-up: %w", err)
	}
	res.Open = time.Since(t0)
	heap1, rss1 := memNow()
	res.HeapInuseKB = int64(heap1) / 1024
	res.HeapPerKey = (float64(heap1) - float64(heap0)) / float64(keys)
	res.RSSPerKey = (float64(rss1) - float64(rss0)) / float64(keys)
	// every key must be there: read a few back
	probe := []string{keyName("startup", 0), keyName("startup", keys/2), keyName("startup", keys-1)}
	if _, err := s.get(ctx, probe); err != nil {
		_ = s.Close()
		return res, fmt.Errorf("bench: start-up: after the restart: %w", err)
	}
	// The start-up of a node whose Raft log passed SnapshotThreshold restores a snapshot
	// instead of replaying the log: snapshot, close, and time that open too.
	if err := s.n.Snapshot(); err != nil {
		_ = s.Close()
		return res, fmt.Errorf("bench: start-up: snapshot: %w", err)
	}
	if err := s.Close(); err != nil {
		return res, fmt.Errorf("bench: start-up: close: %w", err)
	}
	t1 := time.Now()
	s, err = openStore(ctx, dir)
	if err != nil {
		return res, fmt.Errorf("bench: start-up from the snapshot: %w", err)
	}
	res.SnapshotOpen = time.Since(t1)
	defer s.Close()
	if _, err := s.get(ctx, probe); err != nil {
		return res, fmt.Errorf("bench: start-up: after the restart from the snapshot: %w", err)
	}
	return res, nil
}

// crashWriter runs the child that commits the keys and SIGKILLs it once it says so.
func crashWriter(ctx context.Context, dir string, keys, value int, seed uint64) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), childEnv+"="+dir, childKeysEnv+"="+strconv.Itoa(keys),
		childValueEnv+"="+strconv.Itoa(value), childSeedEnv+"="+strconv.FormatUint(seed, 10))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, childReady+" ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// the data directory may hold a partial run: start again from nothing
		_ = os.RemoveAll(dir)
		return fmt.Errorf("the child did not report its keys committed (stdout %q, stderr %q)", strings.TrimSpace(line), lastLine(stderr.String()))
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil // killed, as meant
	}
	return err
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// memNow returns the live Go heap (HeapAlloc after two GCs: the second empties what sync.Pools
// kept through the first) and the process's VmRSS (after returning free memory to the OS), in
// bytes.
func memNow() (heapLive, rss uint64) {
	runtime.GC()
	debug.FreeOSMemory() // a GC, and free spans handed back, so that VmRSS tracks live memory
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	b, err := os.ReadFile(filepath.Join("/proc", "self", "status"))
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				rss = kb * 1024
			}
		}
	}
	return m.HeapAlloc, rss
}
