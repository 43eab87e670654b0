package main

import (
	"runtime"
	"testing"
)

func TestRaiseProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	cases := []struct {
		env        string // GOMAXPROCS in the environment ("": unset)
		start, got int
	}{
		{"", 1, minProcs},
		{"", 2, minProcs},
		{"", minProcs + 2, minProcs + 2}, // more cores than minProcs: left alone
		{"2", 2, 2},                      // the operator's value stands
		{"1", 1, 1},
		{"abc", 2, minProcs}, // values the runtime ignores are ignored
		{"0", 2, minProcs},
		{"-1", 2, minProcs},
	}
	for _, c := range cases {
		t.Setenv("GOMAXPROCS", c.env)
		runtime.GOMAXPROCS(c.start)
		if got := raiseProcs(); got != c.got || runtime.GOMAXPROCS(0) != c.got {
			t.Errorf("GOMAXPROCS=%q, runtime at %d: raiseProcs gave %d (runtime %d), want %d",
				c.env, c.start, got, runtime.GOMAXPROCS(0), c.got)
		}
	}
}
