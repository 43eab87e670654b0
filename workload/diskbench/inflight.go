package diskbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvoffload/kvoffload/vfs"
)

// Pattern is the access pattern of a Job.
type Pattern int

const (
	// SeqWritePattern writes the file front to back, block by block (fio --rw=write).
	SeqWritePattern Pattern = iota + 1
	// RandReadPattern reads blocks at uniformly random block-aligned offsets of a file laid
	// out first (fio --rw=randread).
	RandReadPattern
	// RandWritePattern overwrites blocks at uniformly random block-aligned offsets of a file
	// laid out first (fio --rw=randwrite).
	RandWritePattern
)

func (p Pattern) String() string {
	switch p {
	case SeqWritePattern:
		return "seq-write"
	case RandReadPattern:
		return "rand-read"
	case RandWritePattern:
		return "rand-write"
	}
	return "unknown"
}

// Job is one O_DIRECT measurement with Depth I/Os in flight, as fio keeps --iodepth I/Os in
// flight. Random reads go through vfs.ReadBatch, native AIO as with fio's libaio engine and
// the store's own reads (one goroutine submits and reaps); writes are issued by Depth
// goroutines, each one pwrite at a time on the same O_DIRECT descriptor (with 1 MiB writes
// the per-I/O cost of a goroutine is small next to the transfer).
type Job struct {
	Dir       string  // directory of the scratch file (removed afterwards)
	Pattern   Pattern // what to do
	Block     int     // bytes per I/O; a multiple of 4096
	Depth     int     // I/Os in flight (goroutines)
	FileSize  int64   // bytes of the scratch file (random patterns: laid out before the timing starts)
	Ops       int64   // I/Os to time; for SeqWritePattern 0 means FileSize/Block
	SyncEvery int64   // RandWritePattern: an fdatasync after every SyncEvery writes (fio --fsync=N); 0: none
	Batch     int64   // SeqWritePattern: each goroutine writes runs of Batch blocks, each run then fdatasync'd, and P99 is per run (batches.go); 0: per write
	EndSync   bool    // write patterns: one fdatasync after the last write, inside the timing (fio --end_fsync=1)
	Seed      uint64  // random offsets (random patterns)
}

// JobResult is what a Job measured. MB is 10^6 bytes.
type JobResult struct {
	Job      Job
	Bytes    int64
	Ops      int64
	Elapsed  time.Duration
	Direct   bool    // O_DIRECT was in effect (false: the filesystem refused it; figures are page-cache figures)
	MBPerSec float64 // Bytes / 10^6 / Elapsed seconds
	IOPS     float64 // Ops / Elapsed seconds
	P99      time.Duration
}

// Run performs j and reports its throughput and per-I/O p99 latency (per run of Batch writes
// when Batch is set). The timing includes the
// fdatasyncs j asks for; laying out the file for the random patterns is not timed. When ctx
// ends, the I/Os in flight finish, no new one starts, and Run returns ctx's error wrapped.
func Run(ctx context.Context, j Job) (JobResult, error) {
	if j.Block <= 0 || j.Block%4096 != 0 {
		return JobResult{}, fmt.Errorf("diskbench: block %d bytes is not a positive multiple of 4096 (the O_DIRECT alignment)", j.Block)
	}
	if j.Depth < 1 || (j.Pattern == RandReadPattern && j.Depth > vfs.MaxBatchDepth) {
		return JobResult{}, fmt.Errorf("diskbench: depth %d is outside 1..%d", j.Depth, vfs.MaxBatchDepth)
	}
	if j.Batch < 0 {
		return JobResult{}, fmt.Errorf("diskbench: batch %d writes is negative", j.Batch)
	}
	blocks := j.FileSize / int64(j.Block)
	if blocks < 1 {
		return JobResult{}, fmt.Errorf("diskbench: file size %d bytes holds no %d-byte block", j.FileSize, j.Block)
	}
	ops := j.Ops
	if ops <= 0 {
		if j.Pattern != SeqWritePattern {
			return JobResult{}, fmt.Errorf("diskbench: %s needs Ops > 0, got %d", j.Pattern, j.Ops)
		}
		ops = blocks
	}
	if j.Pattern == SeqWritePattern && ops > blocks {
		ops = blocks
	}
	path := filepath.Join(j.Dir, fmt.Sprintf(".diskbench-%d-%s", os.Getpid(), j.Pattern))
	defer os.Remove(path)
	f, direct, err := openDirect(path, j.Pattern != SeqWritePattern)
	if err != nil {
		return JobResult{}, err
	}
	defer f.Close()
	if j.Pattern != SeqWritePattern {
		if err := layOut(f, blocks*int64(j.Block)); err != nil {
			return JobResult{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return JobResult{}, fmt.Errorf("diskbench: %w", err)
	}
	if j.Pattern == RandReadPattern {
		return randRead(ctx, j, path, ops, blocks, direct)
	}
	if j.Pattern == SeqWritePattern && j.Batch > 0 {
		return seqBatches(ctx, j, f, ops, direct)
	}
	var (
		next   atomic.Int64 // I/Os claimed
		writes atomic.Int64 // writes done (for SyncEvery)
	)
	start := time.Now()
	all, err := writers(ctx, j, func(g int, buf []byte, failed func() bool) ([]time.Duration, error) {
		rng := rand.New(rand.NewPCG(j.Seed, uint64(g)+1))
		lat := make([]time.Duration, 0, ops/int64(j.Depth)+1)
		for !failed() {
			i := next.Add(1) - 1
			if i >= ops {
				break
			}
			off := i * int64(j.Block)
			if j.Pattern != SeqWritePattern {
				off = rng.Int64N(blocks) * int64(j.Block)
			}
			t0 := time.Now()
			if err := writeAt(f, j, buf, off); err != nil {
				return lat, err
			}
			if j.Pattern == RandWritePattern && j.SyncEvery > 0 && writes.Add(1)%j.SyncEvery == 0 {
				if err := datasync(f); err != nil {
					return lat, err
				}
			}
			lat = append(lat, time.Since(t0))
		}
		return lat, nil
	})
	if err != nil {
		return JobResult{}, err
	}
	if j.EndSync {
		if err := datasync(f); err != nil {
			return JobResult{}, err
		}
	}
	return result(j, ops, time.Since(start), direct, all), nil
}

// writeAt writes buf at off, naming j's pattern and the offset in an error.
func writeAt(f *os.File, j Job, buf []byte, off int64) error {
	if _, err := f.WriteAt(buf, off); err != nil {
		return fmt.Errorf("diskbench: %s at %d: %w", j.Pattern, off, err)
	}
	return nil
}

func datasync(f *os.File) error {
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("diskbench: fdatasync: %w", err)
	}
	return nil
}

// writers runs work on j.Depth goroutines, each with an O_DIRECT buffer of j.Block bytes of
// its own pattern (byte i is i*7+g+1 for writer g), and returns every latency they recorded.
// A writer returns once failed() reports another's error or the end of ctx; writers then
// returns the first error, else ctx's (wrapped).
func writers(ctx context.Context, j Job, work func(g int, buf []byte, failed func() bool) ([]time.Duration, error)) ([]time.Duration, error) {
	var (
		firstEr atomic.Pointer[error]
		wg      sync.WaitGroup
		lats    = make([][]time.Duration, j.Depth)
	)
	for g := range j.Depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := aligned(j.Block)
			for i := range buf {
				buf[i] = byte(i*7 + g + 1)
			}
			lat, err := work(g, buf, func() bool { return firstEr.Load() != nil || ctx.Err() != nil })
			if err != nil {
				firstEr.CompareAndSwap(nil, &err)
			}
			lats[g] = lat
		}()
	}
	wg.Wait()
	if e := firstEr.Load(); e != nil {
		return nil, *e
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("diskbench: %w", err)
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	return all, nil
}

// result is what j measured: ops I/Os in el, with each I/O's latency in lats (sorted here).
func result(j Job, ops int64, el time.Duration, direct bool, lats []time.Duration) JobResult {
	sort.Slice(lats, func(a, b int) bool { return lats[a] < lats[b] })
	r := JobResult{Job: j, Ops: ops, Bytes: ops * int64(j.Block), Elapsed: el, Direct: direct}
	r.MBPerSec = float64(r.Bytes) / 1e6 / el.Seconds()
	r.IOPS = float64(r.Ops) / el.Seconds()
	if len(lats) > 0 {
		r.P99 = lats[min(len(lats)-1, len(lats)*99/100)]
	}
	return r
}

// openDirect opens path with O_DIRECT, or buffered if the filesystem refuses O_DIRECT.
func openDirect(path string, rw bool) (*os.File, bool, error) {
	flags := os.O_CREATE | os.O_TRUNC | os.O_WRONLY
	if rw {
		flags = os.O_CREATE | os.O_TRUNC | os.O_RDWR
	}
	f, err := os.OpenFile(path, flags|unix.O_DIRECT, 0o640)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return nil, false, fmt.Errorf("diskbench: %w", err)
	}
	f, err = os.OpenFile(path, flags, 0o640)
	if err != nil {
		return nil, false, fmt.Errorf("diskbench: %w", err)
	}
	return f, false, nil
}

// layOut writes size bytes (1 MiB blocks) and fdatasyncs them, so that random writes
// overwrite allocated blocks and random reads read real data (fio lays its files out too).
func layOut(f *os.File, size int64) error {
	const chunk = 1 << 20
	buf := aligned(chunk)
	for i := range buf {
		buf[i] = byte(i*13 + 5)
	}
	for off := int64(0); off < size; off += chunk {
		n := min(int64(chunk), size-off)
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			return fmt.Errorf("diskbench: laying out the file: %w", err)
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("diskbench: fdatasync: %w", err)
	}
	return nil
}
