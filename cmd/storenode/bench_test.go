package main

import (
	"strconv"
	"testing"

	"github.com/kvoffload/kvoffload/workload/bench"
)

// The bench's replay phase replays what `storenode replay` does with no flags: the shipped
// sample, whole, with that command's flag defaults.
func TestBenchReplayIsReplayDefaults(t *testing.T) {
	fl := replayCmd().Flags()
	def := func(name string) string { return fl.Lookup(name).DefValue }
	block, err := parseSize(def("block-size"))
	if err != nil {
		t.Fatal(err)
	}
	writers, err := strconv.Atoi(def("writers"))
	if err != nil {
		t.Fatal(err)
	}
	seed, err := strconv.ParseUint(def("seed"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if def("trace") != "" || def("requests") != "0" {
		t.Fatalf("storenode replay's default trace is %q, its first %s requests: not the whole shipped sample the bench replays", def("trace"), def("requests"))
	}
	for _, o := range []bench.Options{bench.Full(""), bench.Quick("")} {
		r := o.Replay
		if r.Writers != writers || int64(r.BlockSize) != block || r.Model != def("model") || r.Seed != seed || o.ReplayRequests != 0 {
			t.Errorf("bench replays %d requests (0: all) with %d writers, %d-byte blocks, model %q, seed %d; storenode replay's defaults are all, %d, %d, %q, %d",
				o.ReplayRequests, r.Writers, r.BlockSize, r.Model, r.Seed, writers, block, def("model"), seed)
		}
	}
}
