package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvoffload/kvoffload/workload/bench"
)

type benchFlags struct {
	cpuProfile   string
	dir          string
	quick        bool
	json         bool
	pebble       bool
	pebbleModule string
	only         string
	o            bench.Options
	sizes        map[string]*string // size flags, parsed over the preset when given
}

func benchCmd() *cobra.Command {
	f := benchFlags{sizes: map[string]*string{}}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the disk's limits and kvoffload (embedded) beside them, with the peers, in one run",
		Long: `bench measures, on the filesystem of --dir and in the same run: the disk's limits
(O_DIRECT, fio-like: sequential 1 MiB writes, random 256 KiB reads, random 4 KiB writes and
reads); an embedded kvoffload node's offload at 256 KiB and 2 MiB, BatchGet with the page cache
dropped (32 readers and one), 4 KiB objects both ways, 64-byte metadata commits, start-up after
a SIGKILL and memory per committed key; the 256 KiB offload and BatchGet again through a
client of a node served in the bench's process, over its local socket (shared memory) and
over gRPC on loopback TCP, each as a ratio to the embedded node's in the same round; and one
file per block with fsync (and pebble with --pebble) on the same workload; and, at the end of
each round (--replay-rounds), the replay phase: the shipped Mooncake sample replayed as
storenode replay does by default into an embedded node, the local path, the embedded node
again and the stream path, each on a fresh directory, the served paths' written and read-back
MB/s as ratios to the embedded run just before them. Limit and store runs alternate within
each round; the table shows medians over --rounds and every ratio to its limit.
--only replay runs the replay phase alone. docs/benchmarks.md says what each figure measures.
The full run takes a few minutes and about 10 GB of disk writes, and the replay phase about
half a minute and 5.5 GB more per round; --quick about a minute and a half, with one replay
phase (its small sizes miss some targets that full runs meet: docs/benchmarks.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd.Context(), cmd.Flags(), f)
		},
	}
	fl := cmd.Flags()
	def := os.Getenv("TMPDIR")
	if def == "" {
		def = "."
	}
	fl.StringVar(&f.dir, "dir", def, "directory on the disk to measure ($TMPDIR when set); the bench works in a fresh subdirectory of it")
	fl.BoolVar(&f.quick, "quick", false, "small sizes: about 1.5 minutes, noisier figures")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	fl.BoolVar(&f.json, "json", false, "print the result as one JSON object")
	fl.IntVar(&f.o.Rounds, "rounds", 3, "rounds of alternating limit and store runs (medians over them)")
	fl.Uint64Var(&f.o.Seed, "seed", 1, "seed of random offsets, read orders and payloads")
	fl.IntVar(&f.o.Writers, "writers", 32, "offload writers (and 4 KiB readers)")
	fl.BoolVar(&f.pebble, "pebble", false, "also run pebble with synced batches (builds the driver in --pebble-module with the go tool)")
	fl.StringVar(&f.pebbleModule, "pebble-module", "bench", "directory of the pebble driver's module (this repository's bench/)")
	fl.StringVar(&f.only, "only", "", "run only this part of the bench: \""+bench.OnlyReplay+"\" (the replay phase, in each of --rounds)")
	fl.IntVar(&f.o.ReplayRounds, "replay-rounds", 0, fmt.Sprintf("rounds (the first ones) that end with the replay phase; 0 skips it (default every round, --quick %d)", bench.Quick("").ReplayRounds))
	full, quick := bench.Full(""), bench.Quick("")
	for _, s := range []struct {
		name, help string
		full, q    int64
	}{
		{"limit-bytes", "sequential-write limit: bytes per run", full.LimitBytes, quick.LimitBytes},
		{"read-file-bytes", "random 256 KiB read limit: file size", full.ReadFileBytes, quick.ReadFileBytes},
		{"iops-file-bytes", "4 KiB IOPS limits: file size", full.IOPSFileBytes, quick.IOPSFileBytes},
		{"offload-bytes", "256 KiB offload, its reads and the peers (half of it through the local and the stream path): payload bytes per run", full.OffloadBytes, quick.OffloadBytes},
		{"offload-2m-bytes", "2 MiB offload: payload bytes per run", full.Offload2MBytes, quick.Offload2MBytes},
	} {
		f.sizes[s.name] = fl.String(s.name, "", fmt.Sprintf("%s (default %s, --quick %s)", s.help, human(s.full), human(s.q)))
	}
	fl.Int64Var(&f.o.IOPSOps, "iops-ops", 0, fmt.Sprintf("4 KiB IOPS limits: I/Os per run (default %d, --quick %d)", full.IOPSOps, quick.IOPSOps))
	fl.IntVar(&f.o.SmallKeys, "small-keys", 0, fmt.Sprintf("4 KiB offload and BatchGet: keys per run (default %d, --quick %d)", full.SmallKeys, quick.SmallKeys))
	fl.IntVar(&f.o.CommitKeys, "commit-keys", 0, fmt.Sprintf("64-byte commits: keys per run (default %d, --quick %d)", full.CommitKeys, quick.CommitKeys))
	fl.IntVar(&f.o.StartupKeys, "startup-keys", 0, fmt.Sprintf("start-up and memory: committed keys (default %d, --quick %d)", full.StartupKeys, quick.StartupKeys))
	fl.IntVar(&f.o.StartupValue, "startup-value", 0, fmt.Sprintf("start-up: payload bytes per key (default %d)", full.StartupValue))
	return cmd
}

func human(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprint(n)
}

func runBench(ctx context.Context, fl *pflag.FlagSet, f benchFlags) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	o := bench.Full(f.dir)
	if f.quick {
		o = bench.Quick(f.dir)
	}
	o.Rounds, o.Seed, o.Writers = f.o.Rounds, f.o.Seed, f.o.Writers
	o.Only = f.only
	switch {
	case fl.Changed("replay-rounds"):
		o.ReplayRounds = f.o.ReplayRounds
	case !f.quick:
		o.ReplayRounds = o.Rounds
	}
	// storenode replay's default --ahead: the replay phase replays what that command does.
	if o.Replay.Ahead, err = replayAhead(""); err != nil {
		return err
	}
	for name, dst := range map[string]*int64{"limit-bytes": &o.LimitBytes, "read-file-bytes": &o.ReadFileBytes,
		"iops-file-bytes": &o.IOPSFileBytes, "offload-bytes": &o.OffloadBytes, "offload-2m-bytes": &o.Offload2MBytes} {
		if fl.Changed(name) {
			v, err := parseSize(*f.sizes[name])
			if err != nil {
				return fmt.Errorf("--%s: %w", name, err)
			}
			*dst = v
		}
	}
	for name, v := range map[string]struct {
		dst *int
		src int
	}{"small-keys": {&o.SmallKeys, f.o.SmallKeys}, "commit-keys": {&o.CommitKeys, f.o.CommitKeys},
		"startup-keys": {&o.StartupKeys, f.o.StartupKeys}, "startup-value": {&o.StartupValue, f.o.StartupValue}} {
		if fl.Changed(name) {
			*v.dst = v.src
		}
	}
	if fl.Changed("iops-ops") {
		o.IOPSOps = f.o.IOPSOps
	}
	if err := os.MkdirAll(f.dir, 0o750); err != nil {
		return err
	}
	o.Progress = os.Stderr
	if f.pebble {
		out, err := os.MkdirTemp(f.dir, "kvoffload-bench-bin-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(out)
		fmt.Fprintf(os.Stderr, "bench: building the pebble driver in %s\n", f.pebbleModule)
		if o.PebbleBin, err = bench.BuildPebble(ctx, f.pebbleModule, out); err != nil {
			o.PebbleNote = "not run: " + err.Error()
			fmt.Fprintln(os.Stderr, "bench: pebble", o.PebbleNote)
		}
	} else {
		o.PebbleNote = "not run: give --pebble (it builds the driver in bench/ with the go tool and the module proxy)"
	}
	rep, err := bench.Run(ctx, o)
	if err != nil {
		return err
	}
	if f.json { // the table lists the notes itself; the JSON holds them where a reader may not look
		for _, n := range rep.Notes {
			fmt.Fprintln(os.Stderr, "bench: warning:", n)
		}
		return rep.WriteJSON(os.Stdout)
	}
	rep.WriteTable(os.Stdout)
	return nil
}
