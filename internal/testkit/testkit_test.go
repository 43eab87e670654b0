package testkit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that keeps what a helper reports; Fatalf ends the goroutine as
// testing's does, so run calls the helper on a goroutine of its own.
type recorder struct {
	testing.TB
	logs, errs []string
	fatal      bool
	cleanups   []func()
}

func (r *recorder) Helper()                   {}
func (r *recorder) Name() string              { return "TestX/sub" }
func (r *recorder) Cleanup(f func())          { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Logf(f string, a ...any)   { r.logs = append(r.logs, fmt.Sprintf(f, a...)) }
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *recorder) Fatalf(f string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(f, a...))
	r.fatal = true
	runtime.Goexit()
}

// run calls fn with a fresh recorder, then its cleanups, and returns the recorder.
func run(fn func(tb testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	return r
}

// TestSeedOrder: -seed wins over $KVOFFLOAD_SEED, which wins over the clock, and the log
// line names the seed and a command that replays the test with it.
func TestSeedOrder(t *testing.T) {
	old := seedFlag
	t.Cleanup(func() { seedFlag = old })

	seedFlag = 0
	t.Setenv(SeedEnv, "42")
	r := run(func(tb testing.TB) {
		if got := Seed(tb); got != 42 {
			tb.Errorf("seed %d from the environment, want 42", got)
		}
	})
	if len(r.errs) > 0 || len(r.logs) != 1 {
		t.Fatalf("errors %q, logs %q", r.errs, r.logs)
	}
	// The replay builds as this binary was built: -tags invariants under scripts/test.sh.
	want := regexp.MustCompile(`^seed 42 \(replay: go test (-tags \S+ )?\./internal/testkit -run '\^TestX/sub\$' -seed 42\)$`)
	if !want.MatchString(r.logs[0]) {
		t.Errorf("log %q, want %s", r.logs[0], want)
	}

	seedFlag = 7
	if r := run(func(tb testing.TB) { Seed(tb) }); !strings.HasPrefix(r.logs[0], "seed 7 ") {
		t.Errorf("with -seed 7: log %q", r.logs[0])
	}

	seedFlag = 0
	t.Setenv(SeedEnv, "")
	if r := run(func(tb testing.TB) { Seed(tb) }); len(r.errs) > 0 || strings.HasPrefix(r.logs[0], "seed 0 ") {
		t.Errorf("from the clock: errors %q, log %q", r.errs, r.logs)
	}

	t.Setenv(SeedEnv, "x")
	if r := run(func(tb testing.TB) { Seed(tb) }); !r.fatal {
		t.Errorf("a malformed %s was accepted", SeedEnv)
	}
}

// TestRandReplays: one seed, one stream.
func TestRandReplays(t *testing.T) {
	a, b := NewRand(9), NewRand(9)
	for range 10 {
		if a.Uint64() != b.Uint64() {
			t.Fatal("two generators of one seed differ")
		}
	}
	if p := Payload(9, 64); string(p) != string(Payload(9, 64)) || string(p) == string(Payload(10, 64)) {
		t.Error("Payload is not a function of its seed")
	}
}

func TestEventually(t *testing.T) {
	n := 0
	r := run(func(tb testing.TB) { Eventually(tb, time.Second, "three calls", func() bool { n++; return n == 3 }) })
	if r.fatal || n != 3 {
		t.Errorf("a condition met on the third call: fatal %v after %d calls", r.fatal, n)
	}
	r = run(func(tb testing.TB) { Eventually(tb, 20*time.Millisecond, "never", func() bool { return false }) })
	if !r.fatal || !strings.Contains(r.errs[0], "waiting for never") {
		t.Errorf("a condition never met: fatal %v, errors %q", r.fatal, r.errs)
	}
}

func TestMust(t *testing.T) {
	if r := run(func(tb testing.TB) { Must(tb, nil, "open") }); r.fatal {
		t.Error("Must failed on a nil error")
	}
	r := run(func(tb testing.TB) { Must(tb, errors.New("boom"), "Open(%s)", "/d") })
	if !r.fatal || r.errs[0] != "Open(/d): boom" {
		t.Errorf("fatal %v, errors %q", r.fatal, r.errs)
	}
}

type closer struct{ err error }

func (c closer) Close() error { return c.err }

func TestCloseAtEnd(t *testing.T) {
	errClosed := errors.New("closed")
	for _, tc := range []struct {
		c     closer
		fails bool
	}{
		{closer{nil}, false},
		{closer{fmt.Errorf("store: %w", errClosed)}, false},
		{closer{errors.New("sync failed")}, true},
	} {
		r := run(func(tb testing.TB) { CloseAtEnd(tb, tc.c, errClosed) })
		if got := len(r.errs) > 0; got != tc.fails {
			t.Errorf("Close returning %v: reported %q", tc.c.err, r.errs)
		}
	}
}

func TestModuleRoot(t *testing.T) {
	root := ModuleRoot(t)
	if _, err := os.Stat(filepath.Join(root, "internal", "testkit", "testkit.go")); err != nil {
		t.Errorf("ModuleRoot %s: %v", root, err)
	}
}

func TestGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.golden")
	if r := run(func(tb testing.TB) { Golden(tb, path, []byte("ab"), "x") }); !r.fatal {
		t.Error("a missing golden file passed")
	}
	*updateFlag = true
	r := run(func(tb testing.TB) { Golden(tb, path, []byte("ab"), "x") })
	*updateFlag = false
	if r.fatal {
		t.Fatalf("-update: %q", r.errs)
	}
	if r := run(func(tb testing.TB) {
		if got := Golden(tb, path, []byte("ab"), "x"); string(got) != "ab" {
			tb.Errorf("Golden returned %q", got)
		}
	}); r.fatal || len(r.errs) > 0 {
		t.Errorf("the same bytes: %q", r.errs)
	}
	r = run(func(tb testing.TB) { Golden(tb, path, []byte("ac"), "the x record") })
	if !r.fatal || !strings.HasPrefix(r.errs[0], "the x record changed from "+path+" at byte 1:") {
		t.Errorf("other bytes: %q", r.errs)
	}
}
