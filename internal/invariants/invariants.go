// Package invariants switches on the assertions of the store's core: checks of states its own
// code must never reach (an extent owned twice, a byte counter below zero, a pin dropped that
// was never taken, an intent resolved twice), as opposed to operating errors, which the code
// handles. Imitates pebble's internal/invariants.
//
// Enabled is a constant: true only in builds with -tags invariants, which is how CI runs the
// race tests (scripts/test.sh). A check is written
//
//	if invariants.Enabled && b.liveBytes < 0 {
//		invariants.Failf("bucketstore: liveBytes >= 0", "bucket %d: %d", b.id, b.liveBytes)
//	}
//
// so a normal build compiles it away: the store that ships neither pays for the checks nor
// behaves differently. A check belongs where a state changes and must cost about what the
// change costs (a lookup, a comparison); a full recount goes where the code already walks
// everything (a Restore, a start-up load, a Close). A check changes nothing the code reads:
// what it must remember between changes lives in fields that only checks read.
//
// Only states the code itself builds are asserted: input from a disk, a peer or a snapshot
// that breaks a rule is an error wrapping the package's sentinel (ErrCorrupt, ErrBadSnapshot),
// in every build.
package invariants

import "fmt"

// Violation is what Failf panics with: the invariant that broke and what was found.
type Violation struct {
	Invariant string // the rule, as its package states it ("bucketstore: liveBytes >= 0")
	Detail    string // the values that break it
}

func (v *Violation) Error() string {
	return "invariant violated: " + v.Invariant + ": " + v.Detail
}

// Failf panics with a *Violation of invariant, its detail formatted from format and args.
// Call it only under `if invariants.Enabled`.
func Failf(invariant, format string, args ...any) {
	panic(&Violation{Invariant: invariant, Detail: fmt.Sprintf(format, args...)})
}

// Catch runs fn and returns the Violation it panicked with, or nil if it returned; any other
// panic goes on. Tests use it to show that a check fires on a state broken on purpose.
func Catch(fn func()) (v *Violation) {
	defer func() {
		if r := recover(); r != nil {
			var ok bool
			if v, ok = r.(*Violation); !ok {
				panic(r)
			}
		}
	}()
	fn()
	return nil
}
