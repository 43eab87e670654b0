//go:build chaos

package failpoint

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether failpoints are compiled in.
const Enabled = true

type action struct {
	kind  string // crash, sleep, error, func
	fn    func() error
	sleep time.Duration
	nth   int64 // 0 = every hit
}

var (
	mu       sync.Mutex
	armed    map[string]action
	hits     = map[string]int64{} // since the last Reset: what @N counts
	totals   = map[string]int64{} // over the whole process: coverage
	loadOnce sync.Once
)

func load() {
	mu.Lock()
	defer mu.Unlock()
	if armed == nil {
		armed = map[string]action{}
	}
	spec := os.Getenv("KVOFFLOAD_FAILPOINTS")
	if spec == "" {
		return
	}
	for _, item := range strings.Split(spec, ",") {
		name, act, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			panic(fmt.Sprintf("failpoint: bad KVOFFLOAD_FAILPOINTS item %q (want name=action)", item))
		}
		a, err := parse(act)
		if err != nil {
			panic(err)
		}
		armed[name] = a
	}
}

func parse(s string) (action, error) {
	var a action
	if base, n, ok := strings.Cut(s, "@"); ok {
		nth, err := strconv.ParseInt(n, 10, 64)
		if err != nil || nth < 1 {
			return a, fmt.Errorf("failpoint: bad hit number in %q", s)
		}
		a.nth, s = nth, base
	}
	switch {
	case s == "crash", s == "error", s == "torn":
		a.kind = s
	case strings.HasPrefix(s, "sleep(") && strings.HasSuffix(s, ")"):
		ms, err := strconv.Atoi(s[len("sleep(") : len(s)-1])
		if err != nil {
			return a, fmt.Errorf("failpoint: bad sleep in %q", s)
		}
		a.kind, a.sleep = "sleep", time.Duration(ms)*time.Millisecond
	default:
		return a, fmt.Errorf("failpoint: unknown action %q", s)
	}
	return a, nil
}

// Enable arms name with an action in the syntax of KVOFFLOAD_FAILPOINTS ("crash@2",
// "sleep(500)", "error").
func Enable(name, spec string) error {
	loadOnce.Do(load)
	a, err := parse(spec)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	armed[name] = a
	return nil
}

// Disable disarms name.
func Disable(name string) {
	loadOnce.Do(load)
	mu.Lock()
	defer mu.Unlock()
	delete(armed, name)
}

// Hit counts a hit of name and runs its armed action, if any.
func Hit(name string) error {
	loadOnce.Do(load)
	mu.Lock()
	hits[name]++
	totals[name]++
	n := hits[name]
	a, ok := armed[name]
	mu.Unlock()
	if !ok || (a.nth != 0 && a.nth != n) {
		return nil
	}
	switch a.kind {
	case "crash":
		Crash()
	case "torn":
		return ErrTorn
	case "sleep":
		time.Sleep(a.sleep)
	case "error":
		return ErrInjected
	case "func":
		return a.fn()
	}
	return nil
}

// EnableFunc arms name to call fn on its nth hit since the last Reset (0 = every hit); fn's
// error is returned by Hit. In-process crash tests use it to capture the durable state at an
// exact step; unit tests use it in normal builds too (off.go).
func EnableFunc(name string, nth int64, fn func() error) {
	loadOnce.Do(load)
	mu.Lock()
	defer mu.Unlock()
	armed[name] = action{kind: "func", fn: fn, nth: nth}
}

// Reset disarms every failpoint and zeroes the hit counters that @N refers to (Hits); the
// coverage counters (Totals) keep counting.
func Reset() {
	loadOnce.Do(load)
	mu.Lock()
	defer mu.Unlock()
	armed = map[string]action{}
	hits = map[string]int64{}
}

// Hits returns a copy of the hit counters since the last Reset.
func Hits() map[string]int64 {
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(hits)
}

// Totals returns a copy of the hit counters over the whole process (Reset does not zero them).
func Totals() map[string]int64 {
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(totals)
}

// Coverage formats Totals as a table sorted by name; every name in All is listed, hit or not.
func Coverage() string {
	h := Totals()
	for _, k := range All {
		h[k] += 0
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(h)) {
		fmt.Fprintf(&b, "%-24s %d\n", k, h[k])
	}
	return b.String()
}

// Crash kills this process with SIGKILL: no deferred function, Close or fsync runs.
func Crash() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught; never return
}
