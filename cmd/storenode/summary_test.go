package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/workload/replay"
)

// TestPrintSummary: an interrupted replay does not claim "missing 0, corrupt 0", and the
// disk line explains a missing measurement only where one was to be taken (a new user was
// told "every key was already stored" by an interrupted run against a cluster).
func TestPrintSummary(t *testing.T) {
	for _, c := range []struct {
		name     string
		s        replay.Summary
		baseline bool
		want     []string
		not      []string
	}{
		{"interrupted", replay.Summary{Keys: 44, UniqueKeys: 40}, false,
			[]string{"not verified"}, []string{"missing         0", "disk limit"}},
		{"warm embedded", replay.Summary{Keys: 10, AlreadyStored: 10, Verified: true}, true,
			[]string{"no ratio: nothing was written", "missing         0"}, nil},
		{"warm remote", replay.Summary{Store: storeName("unix:///run/kv.sock", ""), Keys: 10, AlreadyStored: 10, Verified: true}, false,
			[]string{"missing         0", "store           local path: unix:///run/kv.sock"}, []string{"disk limit"}},
		{"stream", replay.Summary{Store: storeName("10.0.0.1:7400,10.0.0.2:7400", ""), Keys: 1, Verified: true}, false,
			[]string{"store           stream path: gRPC to 10.0.0.1:7400,10.0.0.2:7400"}, nil},
		{"disk line", replay.Summary{Keys: 10, Stored: 10, Bytes: 1 << 20, MBPerSec: 1000, Verified: true,
			DiskMBPerSec: 2000, DiskBeforeMBPerSec: 1800, DiskAfterMBPerSec: 2200, RatioToDisk: 0.5}, true,
			[]string{"disk limit      2000 MB/s, the mean of 1800 before and 2200 after the replay", "ratio 0.50"}, []string{"no ratio"}},
		{"failed batches", replay.Summary{Keys: 10, BatchErrors: 2, Verified: true, Missing: 10}, true,
			[]string{"missing         10"}, []string{"already stored)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			printSummary(&b, c.s, false, c.baseline)
			for _, w := range c.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("summary lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range c.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("summary has %q:\n%s", w, b.String())
				}
			}
		})
	}
}
