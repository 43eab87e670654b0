package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/nodehook"
	"github.com/kvoffload/kvoffload/node"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/workload/bench"
	"github.com/kvoffload/kvoffload/workload/diskbench"
	"github.com/kvoffload/kvoffload/workload/replay"
	"github.com/kvoffload/kvoffload/workload/trace"
)

type replayFlags struct {
	creds     apiCreds // --tls-ca, --token-file (with --addr)
	addr      string
	data      string
	tracePath string
	writers   int
	ahead     string
	blockSize string
	requests  int
	model     string
	seed      uint64
	json      bool
	baseline  string
	verbose   bool
	dataSet   bool // --data was given explicitly
}

func replayCmd() *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Replay a Mooncake-format trace against an embedded single node or a running cluster and verify every key",
		Long: `replay opens an embedded single node in --data, offloads one batch per trace request
from --writers concurrent writers (each block's payload derived from its key), then reads every
key back and verifies it. Without --trace it replays the embedded sample (the first 200
requests of Mooncake's conversation trace). The exit status is non-zero if any key is missing,
corrupt or unavailable, or if the replay was interrupted or stopped (the store could not take a
batch). Run it twice on the same directory: the second run finds every key AlreadyStored.

With --addr it drives a running cluster through the Go client instead (same workload, same
summary); the disk baseline is then skipped unless --data names a directory on the disk to
measure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.dataSet = cmd.Flags().Changed("data")
			return runReplay(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	f.creds.register(fl)
	fl.StringVar(&f.addr, "addr", "", "drive a running cluster at these API addresses (host:port[,host:port...], or unix://PATH for a node's --local-socket: the shared-memory path) instead of an embedded node")
	fl.StringVar(&f.data, "data", "./kvoffload-data", "data directory of the embedded node")
	fl.StringVar(&f.tracePath, "trace", "", "Mooncake-format trace file (default: the embedded sample)")
	fl.IntVar(&f.writers, "writers", 32, "concurrent writers")
	fl.StringVar(&f.ahead, "ahead", "", "payload bytes generated before the clock starts and kept ahead of the writers, in memory (1 = one batch at a time); default 2GiB, or an eighth of the machine's memory if less")
	fl.StringVar(&f.blockSize, "block-size", "256KiB", "payload bytes per block")
	fl.IntVar(&f.requests, "requests", 0, "replay only the first N requests (0 = all)")
	fl.StringVar(&f.model, "model", trace.DefaultModel, "model name used in block keys")
	fl.Uint64Var(&f.seed, "seed", 1, "payload seed")
	fl.BoolVar(&f.json, "json", false, "print the summary as one JSON object")
	fl.StringVar(&f.baseline, "baseline", "512MiB", "bytes of plain sequential write+fdatasync to measure the disk's limit before and after the replay (0 = skip)")
	fl.BoolVar(&f.verbose, "verbose", false, "log the node's info messages to stderr")
	return cmd
}

func runReplay(ctx context.Context, f replayFlags) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	block, err := parseSize(f.blockSize)
	if err != nil {
		return fmt.Errorf("--block-size: %w", err)
	}
	if err := checkReplayFlags(f, block); err != nil {
		return err
	}
	ahead, _ := replayAhead(f.ahead) // checked above
	reqs, err := loadTrace(f.tracePath, f.requests)
	if err != nil {
		return err
	}
	if err := checkBatchLimits(reqs, block); err != nil {
		return err
	}
	target, closeTarget, err := openTarget(ctx, f)
	if err != nil {
		return err
	}
	defer closeTarget()
	baseline := f.addr == "" || f.dataSet // the disk's limit is measured in a local data directory
	var before diskbench.JobResult
	if baseline {
		// The disk line is measured on both sides of the replay (as storenode bench alternates
		// limit and store runs), so that the disk's drift cancels in the ratio to their mean.
		if before, err = diskLine(ctx, f, []int{1, 8}); err != nil {
			fmt.Fprintln(os.Stderr, "baseline:", err)
			baseline = false
		}
	}
	var progress io.Writer = os.Stderr
	opt := replay.Options{Writers: f.writers, Ahead: ahead, BlockSize: int(block), Model: f.model, Seed: f.seed, Progress: progress}
	if c, ok := target.(*client.Client); ok {
		// A unix:// member: the payloads live in a registered region, as a co-located
		// engine's host pool does, and travel as descriptors of it.
		pool, release, err := bench.RegionPool(c, reqs, opt)
		if err != nil {
			return err
		}
		defer release()
		opt.Pool = pool
	}
	sum, err := replay.Run(ctx, target, reqs, opt)
	if err != nil {
		return err
	}
	sum.Store = storeName(f.addr, f.data)
	if ctx.Err() != nil {
		printSummary(os.Stdout, sum, f.json, false)
		return fmt.Errorf("interrupted after %d of %d requests; keys not verified (rerun to finish: stored keys report AlreadyStored)", sum.Requests, len(reqs))
	}
	if sum.Stopped {
		printSummary(os.Stdout, sum, f.json, false)
		return fmt.Errorf("stopped: the store could not take a batch (%s), so no further batch was sent (%d of %d requests had been sent, %d batch errors); keys not verified", sum.FirstProblem, sum.Requests, len(reqs), sum.BatchErrors)
	}
	if baseline && sum.Bytes > 0 {
		if err := addBaseline(ctx, &sum, f, before); err != nil {
			fmt.Fprintln(os.Stderr, "baseline:", err)
		}
	}
	printSummary(os.Stdout, sum, f.json, baseline)
	if sum.Missing > 0 || sum.Corrupt > 0 || sum.Unavailable > 0 {
		return fmt.Errorf("%d keys missing, %d corrupt, %d unavailable (first: %s)", sum.Missing, sum.Corrupt, sum.Unavailable, sum.FirstProblem)
	}
	return nil
}

// openTarget opens what the replay drives: a cluster client with --addr, else an embedded node
// in --data.
func openTarget(ctx context.Context, f replayFlags) (replay.Target, func(), error) {
	if f.addr != "" {
		return dialRemote(ctx, f.addr, f.creds, f.verbose)
	}
	cfg := node.DefaultConfig(f.data)
	cfg.Logger = logger(f.verbose)
	n, err := node.Open(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if rec := nodehook.Of(n).Recovery; rec.Unresolved > 0 || rec.OrphanBytes > 0 {
		fmt.Fprintf(os.Stderr, "recovery: %d unresolved intents (%d already decided, %d rolled forward, %d aborted), %d orphan bytes freed\n",
			rec.Unresolved, rec.AlreadyDone, rec.RolledFwd, rec.Aborted, rec.OrphanBytes)
	}
	return n, func() { _ = n.Close() }, nil
}

// replayAhead parses --ahead, a positive size. "" is the default: replay.DefaultAhead, or an
// eighth of the machine's memory if that is less (the sample's 1.45 GB of payloads ahead
// peak at ~2.5 GB resident, which a small VM would not have).
func replayAhead(s string) (int64, error) {
	if s == "" {
		return defaultAhead(physicalMemory()), nil
	}
	n, err := parseSize(s)
	if err != nil {
		return 0, fmt.Errorf("--ahead %s: %w", s, err)
	}
	if n < 1 {
		return 0, fmt.Errorf("--ahead %s: want a positive size such as 2GiB (1 = one batch at a time)", s)
	}
	return n, nil
}

// defaultAhead is --ahead's default on a machine with mem bytes of memory (0: unknown).
func defaultAhead(mem int64) int64 {
	if mem <= 0 {
		return replay.DefaultAhead
	}
	return max(min(replay.DefaultAhead, mem/8), 64<<20)
}

// maxWriters bounds --writers: each writer is a goroutine with a batch in flight, and a
// value near the int range would make the replay panic allocating its channel
// (TestReplayWritersBound).
const maxWriters = 4096

// checkReplayFlags rejects bad flag values before any work starts.
func checkReplayFlags(f replayFlags, block int64) error {
	if f.writers < 1 || f.writers > maxWriters {
		return fmt.Errorf("--writers must be 1 to %d, got %d", maxWriters, f.writers)
	}
	if f.requests < 0 {
		return fmt.Errorf("--requests must be 0 (all) or positive, got %d", f.requests)
	}
	if _, err := baselineBytes(f.baseline); err != nil {
		return err
	}
	if _, err := replayAhead(f.ahead); err != nil {
		return err
	}
	if bare := strings.Trim(f.blockSize, "0123456789 ") == ""; bare && block < 4096 {
		return fmt.Errorf("--block-size %s is %d bytes; a block is given with a unit (256KiB is a KV block of 256 KiB; write %dB for %d bytes)", f.blockSize, block, block, block)
	}
	if lim := txn.DefaultConfig("x").MaxObjectBytes; block > lim {
		return fmt.Errorf("--block-size %d exceeds the object limit of %d bytes", block, lim)
	}
	return nil
}

// checkBatchLimits rejects a trace whose largest request would exceed the batch byte limit
// at this block size, before payloads are generated.
func checkBatchLimits(reqs []trace.Request, block int64) error {
	lim := txn.DefaultConfig("x")
	for i, r := range reqs {
		if n := int64(len(r.HashIDs)); n*block > lim.MaxBatchBytes || int(n) > lim.MaxBatchKeys {
			return fmt.Errorf("request %d has %d blocks of %d bytes: over the batch limit (%d keys, %d bytes); use a smaller --block-size",
				i+1, n, block, lim.MaxBatchKeys, lim.MaxBatchBytes)
		}
	}
	return nil
}

func loadTrace(path string, limit int) ([]trace.Request, error) {
	var reqs []trace.Request
	if path == "" {
		reqs = trace.Sample()
	} else {
		var err error
		if reqs, err = trace.Load(path); err != nil {
			return nil, err
		}
	}
	if len(reqs) == 0 {
		return nil, errors.New("the trace holds no requests")
	}
	if limit > 0 && limit < len(reqs) {
		reqs = reqs[:limit]
	}
	return reqs, nil
}

// minBaseline is the smallest disk line: a few writes would measure the first write's
// latency, not the disk's rate.
const minBaseline = 64 << 20

// baselineBytes parses --baseline: 0 (in any unit) skips the disk line, else at least
// minBaseline bytes.
func baselineBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if num := strings.TrimSpace(strings.TrimRightFunc(t, unicode.IsLetter)); num != "" && strings.Trim(num, "0") == "" {
		if _, err := parseSize("1" + strings.TrimPrefix(t, num)); err != nil { // the unit must be one
			return 0, fmt.Errorf("--baseline: %w", err)
		}
		return 0, nil // "0", "00", "0MiB", ...
	}
	n, err := parseSize(s)
	if err != nil {
		return 0, fmt.Errorf("--baseline: %w", err)
	}
	if n < minBaseline {
		return 0, fmt.Errorf("--baseline %s is %d bytes: give 0 (no disk line) or at least %d (64MiB)", s, n, minBaseline)
	}
	return n, nil
}

// diskLine measures the disk's sequential-write limit in the data directory as storenode
// bench does (diskbench.SeqWriteLimit): --baseline bytes of 1 MiB O_DIRECT writes and one
// fdatasync, the better of depths writes in flight (before the replay 1 and 8, after it the
// depth that won), because the store keeps several writes in flight too. It returns a zero
// result, and no error, with --baseline 0, and ctx's error if ctx has ended.
func diskLine(ctx context.Context, f replayFlags, depths []int) (diskbench.JobResult, error) {
	total, err := baselineBytes(f.baseline)
	if err != nil || total == 0 {
		return diskbench.JobResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return diskbench.JobResult{}, err
	}
	if err := os.MkdirAll(f.data, 0o750); err != nil {
		return diskbench.JobResult{}, fmt.Errorf("--data: %w", err)
	}
	return diskbench.SeqWriteLimit(ctx, f.data, total, depths)
}

// addBaseline measures the disk line again after the replay and sets the replay's ratio to
// the mean of the two lines, before and after. It is called only when the replay wrote
// something: a warm run (every key AlreadyStored) has no rate to compare.
func addBaseline(ctx context.Context, s *replay.Summary, f replayFlags, before diskbench.JobResult) error {
	if before.MBPerSec <= 0 {
		return nil // --baseline 0
	}
	after, err := diskLine(ctx, f, []int{before.Job.Depth})
	if err != nil {
		return err
	}
	s.DiskDepth = before.Job.Depth
	s.DiskBeforeMBPerSec, s.DiskAfterMBPerSec = before.MBPerSec, after.MBPerSec
	s.DiskMBPerSec = (before.MBPerSec + after.MBPerSec) / 2
	s.RatioToDisk = s.MBPerSec / s.DiskMBPerSec
	return nil
}

func logger(verbose bool) *slog.Logger {
	level := slog.LevelError // raft warns about every single-node election; errors still show
	if verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// storeName says what a replay of --addr addr (or of the embedded node in data) drives.
func storeName(addr, data string) string {
	switch {
	case addr == "":
		return "embedded node in " + data
	case strings.HasPrefix(addr, "unix://"):
		return "local path: " + addr + " (unix socket and shared memory)"
	default:
		return "stream path: gRPC to " + addr
	}
}

// printSummary prints s as text or JSON; baseline says whether the disk's limit was to be
// measured (a local data directory), so that its absence is explained.
func printSummary(w io.Writer, s replay.Summary, asJSON, baseline bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		_ = enc.Encode(s)
		return
	}
	if s.Store != "" {
		fmt.Fprintf(w, "store           %s\n", s.Store)
	}
	fmt.Fprintf(w, "requests        %d\n", s.Requests)
	fmt.Fprintf(w, "keys            %d (%d unique)\n", s.Keys, s.UniqueKeys)
	fmt.Fprintf(w, "stored          %d\n", s.Stored)
	fmt.Fprintf(w, "already stored  %d (joined in flight: %d)\n", s.AlreadyStored, s.Joined)
	fmt.Fprintf(w, "conflict/rejected/failed  %d/%d/%d (batch errors %d)\n", s.Conflict, s.Rejected, s.Failed, s.BatchErrors)
	fmt.Fprintf(w, "bytes           %d written in %.2fs = %.0f MB/s (%d offered, duplicates included)\n", s.Bytes, s.Seconds, s.MBPerSec, s.OfferedBytes)
	if baseline && s.DiskMBPerSec == 0 && s.Bytes == 0 && s.AlreadyStored == s.Keys && s.Keys > 0 {
		fmt.Fprintf(w, "disk limit      no ratio: nothing was written (every key was already stored)\n")
	}
	if s.DiskMBPerSec > 0 {
		fmt.Fprintf(w, "disk limit      %.0f MB/s, the mean of %.0f before and %.0f after the replay (sequential 1 MiB writes + fdatasync in the data dir, O_DIRECT where allowed, %d in flight: the better of 1 and 8): ratio %.2f\n",
			s.DiskMBPerSec, s.DiskBeforeMBPerSec, s.DiskAfterMBPerSec, s.DiskDepth, s.RatioToDisk)
	}
	fmt.Fprintf(w, "batch latency   p50 %.1f ms, p99 %.1f ms\n", s.P50MS, s.P99MS)
	if s.Verified || s.ReadMBPerSec > 0 { // a read-back that did not run has no rate
		fmt.Fprintf(w, "read back       %.0f MB/s\n", s.ReadMBPerSec)
	}
	if !s.Verified {
		fmt.Fprintf(w, "missing/corrupt not verified: the replay was interrupted or stopped before the read-back\n")
	} else {
		compared := s.UniqueKeys - s.Unavailable - s.Missing
		fmt.Fprintf(w, "verified        %d of %d keys read back and compared byte for byte with their payloads\n", compared, s.UniqueKeys)
		fmt.Fprintf(w, "missing         %d\n", s.Missing)
		if s.Unavailable > 0 {
			fmt.Fprintf(w, "unavailable     %d (not lost: they could not be read now, e.g. their owner is down)\n", s.Unavailable)
		}
		fmt.Fprintf(w, "corrupt         %d\n", s.Corrupt)
	}
	if s.FirstProblem != "" {
		fmt.Fprintf(w, "first problem   %s\n", s.FirstProblem)
	}
}
