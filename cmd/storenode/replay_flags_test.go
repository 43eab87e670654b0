package main

import (
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/workload/replay"
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

// TestBaselineBytes: --baseline 0 in any unit ("0MiB" too) skips the disk line; a size below
// 64 MiB ("1" too), which would time a few writes rather than the disk, is refused with the
// limit named.
func TestBaselineBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""}, {"00", 0, ""}, {"0MiB", 0, ""}, {" 0 GiB", 0, ""},
		{"64MiB", 64 << 20, ""}, {"512MiB", 512 << 20, ""},
		{"1", 0, "at least 67108864"}, {"1MiB", 0, "at least 67108864"},
		{"MiB", 0, "invalid size"}, {"garbage", 0, "invalid size"}, {"-5", 0, "must be positive"}, {"0garbage", 0, "invalid size"},
	} {
		got, err := baselineBytes(c.in)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("baselineBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("baselineBytes(%q) = %d, %v; want an error with %q", c.in, got, err, c.err)
		}
	}
}

// --ahead takes a positive size; 0, a negative or a malformed value is refused naming the
// flag, and "" is the default.
func TestReplayAhead(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{{"", defaultAhead(physicalMemory()), true}, {"2GiB", 2 << 30, true}, {"1", 1, true}, {"0", 0, false}, {"-1MiB", 0, false}, {"lots", 0, false}} {
		got, err := replayAhead(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("--ahead %q: %d, %v; want %d, accepted %v", c.in, got, err, c.want, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--ahead") {
			t.Errorf("--ahead %q: %q does not name the flag", c.in, err)
		}
	}
}

// --writers outside 1..maxWriters is refused naming the bound, not replayed (a value near the
// int range would panic allocating the replay's channel).
func TestReplayWritersBound(t *testing.T) {
	for _, w := range []int{0, -1, maxWriters + 1, 1<<63 - 1} {
		err := checkReplayFlags(replayFlags{writers: w, baseline: "0", blockSize: "256KiB"}, 256<<10)
		if err == nil || !strings.Contains(err.Error(), "4096") {
			t.Errorf("--writers %d: %v, want a refusal naming the bound 4096", w, err)
		}
	}
	if err := checkReplayFlags(replayFlags{writers: maxWriters, baseline: "0", blockSize: "256KiB"}, 256<<10); err != nil {
		t.Errorf("--writers %d: %v, want accepted", maxWriters, err)
	}
}

// The default --ahead is replay.DefaultAhead on a large or unknown machine, an eighth of a
// small machine's memory, and never below 64 MiB.
func TestDefaultAhead(t *testing.T) {
	for _, c := range []struct{ mem, want int64 }{
		{0, replay.DefaultAhead}, {32 << 30, replay.DefaultAhead}, {16 << 30, 2 << 30},
		{4 << 30, 512 << 20}, {256 << 20, 64 << 20},
	} {
		if got := defaultAhead(c.mem); got != c.want {
			t.Errorf("defaultAhead(%d) = %d, want %d", c.mem, got, c.want)
		}
	}
}
