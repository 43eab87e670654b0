package invariants

import (
	"strings"
	"testing"
)

// Failf panics with a Violation naming the invariant, which Catch returns; a function that
// returns gives nil, and any other panic passes through Catch.
func TestFailfCatch(t *testing.T) {
	v := Catch(func() { Failf("pkg: n >= 0", "n = %d", -1) })
	if v == nil || v.Invariant != "pkg: n >= 0" || v.Detail != "n = -1" {
		t.Fatalf("Catch = %+v", v)
	}
	if got := v.Error(); !strings.Contains(got, "pkg: n >= 0: n = -1") {
		t.Fatalf("Error() = %q", got)
	}
	if v := Catch(func() {}); v != nil {
		t.Fatalf("Catch of a function that returns = %+v", v)
	}
	defer func() {
		if r := recover(); r != "other" {
			t.Fatalf("recovered %v, want the other panic", r)
		}
	}()
	Catch(func() { panic("other") })
}
