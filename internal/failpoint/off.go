//go:build !chaos

package failpoint

import (
	"sync"
	"sync/atomic"
)

// Enabled reports whether failpoints are compiled in. In a normal build only EnableFunc
// arms a point (for unit tests); KVOFFLOAD_FAILPOINTS, Enable and the hit counters need
// -tags chaos.
const Enabled = false

var (
	anyArmed atomic.Bool // true while funcs is not empty: the fast path of Hit
	funcsMu  sync.Mutex
	funcs    = map[string]*armedFunc{}
)

// armedFunc is what EnableFunc armed for one name.
type armedFunc struct {
	fn   func() error
	nth  int64 // 0 = every hit
	hits int64 // hits of the name since it was armed
}

// Hit runs the function EnableFunc armed for name, if any, and returns its error. While
// nothing is armed it costs one atomic load and returns nil.
func Hit(name string) error {
	if !anyArmed.Load() {
		return nil
	}
	return hitArmed(name)
}

func hitArmed(name string) error {
	funcsMu.Lock()
	a, ok := funcs[name]
	if ok {
		a.hits++
	}
	fire := ok && (a.nth == 0 || a.nth == a.hits)
	funcsMu.Unlock()
	if !fire {
		return nil
	}
	return a.fn() // outside the lock: fn may block, or hit another point
}

// EnableFunc arms name to call fn on its nth hit (0 = every hit); fn's error is returned by
// Hit. In a normal build nth counts the hits since this call (with -tags chaos, since the
// last Reset). Unit tests use it to fail or hold a step; disarm with Disable.
func EnableFunc(name string, nth int64, fn func() error) {
	funcsMu.Lock()
	defer funcsMu.Unlock()
	funcs[name] = &armedFunc{fn: fn, nth: nth}
	anyArmed.Store(true)
}

// Disable disarms name.
func Disable(name string) {
	funcsMu.Lock()
	defer funcsMu.Unlock()
	delete(funcs, name)
	anyArmed.Store(len(funcs) > 0)
}

// Crash is a no-op in normal builds (Hit never asks for it).
func Crash() {}
