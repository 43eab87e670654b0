// Package testkit is what the tests of every package share: the seed of a randomized test,
// waiting for a condition, failing on a setup error, golden files and the module's root
// directory. Only _test.go files import it (internal/lint's TestImportRules holds that); it
// imports nothing of this module, so a leaf package's tests may use it too. It owns the test
// flags -seed and -update, so a package that imports it registers neither.
//
// A randomized test takes its seed from Seed or Rand, never from the clock itself, so every
// run logs the seed and a command that replays it:
//
//	seed 1796025044726883942 (replay: go test -tags chaos ./chaos -run '^TestCrash$' -seed 1796025044726883942)
package testkit

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SeedEnv names the environment variable that seeds every randomized test when -seed is not
// given, for a run over packages whose test binaries do not all take flags
// (KVOFFLOAD_SEED=N go test ./...).
const SeedEnv = "KVOFFLOAD_SEED"

// seedFlag is -seed. The other names are the per-package flags that replay commands in older
// logs name; each sets the same seed.
var seedFlag uint64

// updateFlag is -update: Golden rewrites the golden files instead of comparing.
var updateFlag = flag.Bool("update", false, "rewrite the golden files in testdata/")

func init() {
	flag.Uint64Var(&seedFlag, "seed", 0, "seed of the randomized tests (0: $"+SeedEnv+", else the clock)")
	for _, alias := range []string{"vfs.seed", "fsm.seed", "lru-seed", "sort-seed"} {
		flag.Uint64Var(&seedFlag, alias, 0, "the same as -seed")
	}
}

// Seed returns the seed of tb's randomized test: -seed, else $KVOFFLOAD_SEED, else one from
// the clock. It logs the seed and the command that replays tb with it.
func Seed(tb testing.TB) uint64 {
	tb.Helper()
	seed := seedFlag
	if seed == 0 {
		if env := os.Getenv(SeedEnv); env != "" {
			s, err := strconv.ParseUint(env, 10, 64)
			if err != nil {
				tb.Fatalf("%s=%q: %v", SeedEnv, env, err)
			}
			seed = s
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	tb.Logf("seed %d (replay: %s -run '^%s$' -seed %d)", seed, goTest(), tb.Name(), seed)
	return seed
}

// Rand returns a generator seeded by Seed(tb).
func Rand(tb testing.TB) *rand.Rand {
	tb.Helper()
	return NewRand(Seed(tb))
}

// NewRand returns the generator Rand returns for seed, for a test that derives several
// streams from one seed.
func NewRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Payload returns n bytes derived from seed: a test's data, the same for the same seed.
func Payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// goTest is "go test [-tags T] ./pkg" for the running test binary, read from its build
// information; plain "go test" where that is missing.
var goTest = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "go test"
	}
	cmd := "go test"
	for _, s := range info.Settings {
		if s.Key == "-tags" && s.Value != "" {
			cmd += " -tags " + s.Value
		}
	}
	pkg := strings.TrimSuffix(info.Path, ".test")
	if rel, ok := strings.CutPrefix(pkg, info.Main.Path+"/"); ok {
		pkg = "./" + rel
	} else if pkg == info.Main.Path {
		pkg = "."
	}
	return cmd + " " + pkg
})

// Golden holds got to the golden file at path (under testdata/) and returns the file's
// bytes, for the test to decode them as well; with -update it first writes got to path. A
// missing file or any difference fails tb at once, naming what the bytes are, with both
// byte strings in hex when they are short. A golden file pins a format on disk or on the
// wire: rewrite one only for a deliberate, versioned change.
func Golden(tb testing.TB, path string, got []byte, what string) []byte {
	tb.Helper()
	if *updateFlag {
		Must(tb, os.WriteFile(path, got, 0o644), "-update")
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		if len(got)+len(want) <= 512 {
			tb.Fatalf("%s changed from %s at byte %d: the format is pinned\n got %x\nwant %x", what, path, i, got, want)
		}
		tb.Fatalf("%s changed from %s at byte %d: the format is pinned (%d bytes, golden %d)", what, path, i, len(got), len(want))
	}
	return want
}

// ModuleRoot returns the directory of the go.mod above the test's working directory: the
// module's root, where a test reads the repository's files.
func ModuleRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	Must(tb, err, "the working directory")
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Eventually waits up to timeout for cond, calling it every few milliseconds, and fails tb
// if it is still false then; what names the condition in the failure.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; !cond(); wait = min(2*wait, 10*time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(wait)
	}
}

// Must fails tb at once if err is not nil; the failure reads "what: err", what formatted
// from format and args.
func Must(tb testing.TB, err error, format string, args ...any) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}

// CloseAtEnd closes c when tb's test ends and reports an error of Close that is none of
// closed (a test that closes c itself names the error a second Close returns).
func CloseAtEnd(tb testing.TB, c io.Closer, closed ...error) {
	tb.Helper()
	tb.Cleanup(func() {
		err := c.Close()
		for _, e := range closed {
			if errors.Is(err, e) {
				return
			}
		}
		if err != nil {
			tb.Errorf("Close at the end of the test: %v", err)
		}
	})
}
