package main

import (
	"strings"
	"testing"
)

// A bare --block-size below 4 KiB is refused with the unit to write, rather than replayed as
// blocks of a few bytes; with its unit it is accepted.
func TestReplayRefusesABareSmallBlockSize(t *testing.T) {
	for _, tc := range []struct {
		size string
		ok   bool
	}{{"256", false}, {"256B", true}, {"4096", true}, {"256KiB", true}} {
		block, err := parseSize(tc.size)
		if err != nil {
			t.Fatal(err)
		}
		err = checkReplayFlags(replayFlags{writers: 1, baseline: "0", blockSize: tc.size}, block)
		if tc.ok != (err == nil) {
			t.Errorf("--block-size %s: %v, want accepted %v", tc.size, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "256KiB") {
			t.Errorf("--block-size %s: %q does not say how to write a block size", tc.size, err)
		}
	}
}
