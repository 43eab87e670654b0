// Package bench is `storenode bench`: the disk's own limits and kvoffload's figures (embedded
// node), and the peers a user would otherwise pick, measured in one run on one filesystem,
// limit and store runs alternating so that the disk's drift cancels in each ratio (issue 9,
// docs/benchmarks.md); and the replay of the shipped Mooncake sample into an embedded node and
// through the served paths (replay.go). Every call into the store goes through store.go.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvoffload/kvoffload/workload/diskbench"
	"github.com/kvoffload/kvoffload/workload/replay"
)

// Options size the bench. Sizes are bytes; counts are keys or I/Os.
type Options struct {
	Dir    string // the bench works in a fresh subdirectory of Dir, removed at the end
	Rounds int    // rounds of alternating limit and store runs (medians over them)
	Seed   uint64 // random offsets, read orders and payloads

	LimitBytes     int64 // sequential-write limit: bytes per run (each of 1 and 8 in flight)
	ReadFileBytes  int64 // random 256 KiB read limit: file size; as many reads as it has blocks
	IOPSFileBytes  int64 // 4 KiB IOPS limits: file size
	IOPSOps        int64 // 4 KiB IOPS limits: I/Os per run
	OffloadBytes   int64 // 256 KiB offload (and the reads over it, and the file-per-block peer): payload bytes per run
	Offload2MBytes int64 // 2 MiB offload: payload bytes per run
	SmallKeys      int   // 4 KiB offload and BatchGet: keys per run
	CommitKeys     int   // 64-byte metadata commits: keys per run
	StartupKeys    int   // start-up and memory: committed keys (written once)
	StartupValue   int   // start-up: payload bytes per key

	Writers int // offload writers (32)

	// Only selects a part of the bench: "" is all of it, OnlyReplay the replay phase alone
	// in every round (replay.go).
	Only string
	// ReplayRounds is how many rounds, the first ones, end with the replay phase (replay.go):
	// the shipped sample replayed into an embedded node, the local path and the stream path
	// (at most Rounds count; 0: none). With Only set to OnlyReplay every round runs it.
	ReplayRounds int
	// Replay is the replay phase's options (ReplayDefaults: storenode replay's defaults);
	// Progress is ignored.
	Replay replay.Options
	// ReplayRequests replays only the sample's first requests (0: all of it, as storenode
	// replay does by default).
	ReplayRequests int

	// PebbleBin is a pebble driver built from the bench/ module (BuildPebble); empty: pebble
	// is not run and PebbleNote says why.
	PebbleBin  string
	PebbleNote string

	Progress io.Writer // a line per step; nil: none
}

// Full returns the full run's sizes (under 5 minutes on 2 cores and a ~2 GB/s disk).
func Full(dir string) Options {
	return Options{Dir: dir, Rounds: 3, Seed: 1,
		LimitBytes: 512 << 20, ReadFileBytes: 512 << 20, IOPSFileBytes: 256 << 20, IOPSOps: 1 << 16,
		OffloadBytes: 2 << 30, Offload2MBytes: 2 << 30, SmallKeys: 1 << 16, CommitKeys: 1 << 16,
		StartupKeys: 1 << 20, StartupValue: 1024, Writers: 32, ReplayRounds: 3, Replay: ReplayDefaults()}
}

// Quick returns --quick's sizes (about a minute; the figures are noisier). The replay phase runs
// in the first round only: its trace is the whole sample whatever the sizes.
func Quick(dir string) Options {
	return Options{Dir: dir, Rounds: 3, Seed: 1,
		LimitBytes: 64 << 20, ReadFileBytes: 64 << 20, IOPSFileBytes: 32 << 20, IOPSOps: 8192,
		OffloadBytes: 128 << 20, Offload2MBytes: 256 << 20, SmallKeys: 8192, CommitKeys: 8192,
		StartupKeys: 32768, StartupValue: 1024, Writers: 32, ReplayRounds: 1, Replay: ReplayDefaults()}
}

// Validate names every size that is out of range, with its limit (with Only set to
// OnlyReplay, only those the replay phase uses).
func (o Options) Validate() error {
	if o.Only != "" && o.Only != OnlyReplay {
		return fmt.Errorf("bench: only %q: the one part that runs alone is %q", o.Only, OnlyReplay)
	}
	if o.ReplayRounds < 0 || o.ReplayRequests < 0 {
		return fmt.Errorf("bench: replay rounds (%d) and replay requests (%d) must not be negative", o.ReplayRounds, o.ReplayRequests)
	}
	if o.replayRounds() > 0 && (o.Replay.Writers < 1 || o.Replay.BlockSize < 1) {
		return fmt.Errorf("bench: the replay needs writers (%d) and a block size (%d) of at least 1", o.Replay.Writers, o.Replay.BlockSize)
	}
	if o.Only == OnlyReplay {
		if o.Rounds < 1 {
			return fmt.Errorf("bench: rounds is %d, below the minimum of 1", o.Rounds)
		}
		return nil
	}
	checks := []struct {
		name string
		v    int64
		min  int64
	}{
		{"rounds", int64(o.Rounds), 1}, {"limit bytes", o.LimitBytes, 1 << 20}, {"read file bytes", o.ReadFileBytes, 256 << 10},
		{"IOPS file bytes", o.IOPSFileBytes, 1 << 20}, {"IOPS ops", o.IOPSOps, 256},
		{"offload bytes", o.OffloadBytes, 256 << 10}, {"2 MiB offload bytes", o.Offload2MBytes, 2 << 20},
		{"small keys", int64(o.SmallKeys), 1}, {"commit keys", int64(o.CommitKeys), 1},
		{"start-up keys", int64(o.StartupKeys), 3}, {"start-up value bytes", int64(o.StartupValue), 1}, {"writers", int64(o.Writers), 1},
	}
	for _, c := range checks {
		if c.v < c.min {
			return fmt.Errorf("bench: %s is %d, below the minimum of %d", c.name, c.v, c.min)
		}
	}
	return nil
}

// replayRounds is how many rounds run the replay phase.
func (o Options) replayRounds() int {
	if o.Only == OnlyReplay {
		return o.Rounds
	}
	return min(o.ReplayRounds, o.Rounds)
}

// Run runs the bench and returns the medians.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	start := time.Now()
	r := Report{Rounds: o.Rounds, Seed: o.Seed, Direct: true, CacheDropped: true, PebbleNote: o.PebbleNote,
		GoMaxProcs: runtime.GOMAXPROCS(0), CPUs: runtime.NumCPU(), Only: o.Only, ReplayRounds: o.replayRounds()}
	fsType, tmpfs := filesystem(o.Dir)
	r.FilesystemType = fsType
	if tmpfs {
		r.Notes = append(r.Notes, "the directory is on tmpfs: these are memory figures, not a disk's; give --dir on a real disk")
		b := runner{o: o}
		b.logf("warning: %s is on tmpfs: these are memory figures, not a disk's; give --dir on a real disk", o.Dir)
	}
	work, err := os.MkdirTemp(o.Dir, "kvoffload-bench-")
	if err != nil {
		return r, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(work)
	b := &runner{o: o, work: work, s: samples{}, r: &r}
	for round := range o.Rounds {
		b.prefix, b.writeDepth = fmt.Sprintf("round %d/%d: ", round+1, o.Rounds), 0
		if o.Only == "" {
			if err := b.round(ctx, round); err != nil {
				return r, fmt.Errorf("bench: round %d: %w", round+1, err)
			}
		}
		if round < r.ReplayRounds {
			if err := b.replayRound(ctx, round); err != nil {
				return r, fmt.Errorf("bench: round %d: %w", round+1, err)
			}
		}
	}
	b.s.fill(&r)
	b.prefix = ""
	if o.Only != "" {
		r.Seconds = time.Since(start).Seconds()
		return r, nil
	}
	b.logf("start-up: %d keys of %d bytes, then SIGKILL and node.Open", o.StartupKeys, o.StartupValue)
	st, err := startup(ctx, filepath.Join(work, "startup"), o.StartupKeys, o.StartupValue, o.Seed)
	if err != nil {
		return r, err
	}
	r.StartupKeys, r.StartupSeconds, r.StartupCrashed = st.Keys, st.Open.Seconds(), st.Crashed
	r.StartupSPerGiB = st.Open.Seconds() / (float64(st.Bytes) / (1 << 30))
	r.StartupUSPerKey = float64(st.Open.Microseconds()) / float64(st.Keys)
	r.StartupSnapshotSPerGiB = st.SnapshotOpen.Seconds() / (float64(st.Bytes) / (1 << 30))
	r.StartupSnapshotUSPerKey = float64(st.SnapshotOpen.Microseconds()) / float64(st.Keys)
	r.BytesPerKey, r.RSSPerKey = st.HeapPerKey, st.RSSPerKey
	if st.Note != "" {
		r.Notes = append(r.Notes, "start-up: "+st.Note)
	}
	if o.StartupKeys < 1<<20 {
		r.Notes = append(r.Notes, fmt.Sprintf("start-up with %d keys: the open's fixed costs (Raft start, election) dominate, so its s/GiB and µs/key mean something only with 1M keys (the full run)", o.StartupKeys))
	}
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

type runner struct {
	o       Options
	work    string
	s       samples
	r       *Report
	dropErr bool
	prefix  string // the round the progress lines belong to
	// writeDepth is the writes in flight (1 or 8) that gave the better sequential-write limit
	// in this round's first measurement; 0 before it. Later measurements of the round run at
	// that depth only, which saves a third of the bench's limit writes.
	writeDepth int
}

func (b *runner) logf(format string, args ...any) {
	if b.o.Progress != nil {
		fmt.Fprintf(b.o.Progress, "bench: "+b.prefix+format+"\n", args...)
	}
}

// drop drops the page cache before a read run; the first failure becomes a note.
func (b *runner) drop() {
	if err := dropCaches(); err != nil && !b.dropErr {
		b.dropErr, b.r.CacheDropped = true, false
		b.r.Notes = append(b.r.Notes, err.Error()+": read figures may include page-cache hits")
	}
}

func (b *runner) direct(ok bool) {
	if !ok && b.r.Direct {
		b.r.Direct = false
		b.r.Notes = append(b.r.Notes, "the filesystem refused O_DIRECT: the limits are page-cache figures")
	}
}

// limitW measures the sequential-write limit and records it; it returns MB/s.
func (b *runner) limitW(ctx context.Context) (float64, error) {
	depths := []int{1, 8}
	if b.writeDepth > 0 {
		depths = []int{b.writeDepth}
	}
	l, err := diskbench.SeqWriteLimit(ctx, b.work, b.o.LimitBytes, depths)
	if err != nil {
		return 0, err
	}
	b.writeDepth = l.Job.Depth
	b.direct(l.Direct)
	b.s.add("limit_write_mb_per_s", l.MBPerSec)
	b.s.add("limit_write_p99_ms", float64(l.P99.Microseconds())/1000)
	how := fmt.Sprintf("%d in flight, the depth chosen at the round's start", l.Job.Depth)
	if len(depths) > 1 {
		how = fmt.Sprintf("%d in flight, the better of 1 and 8", l.Job.Depth)
	}
	b.logf("limit: sequential write %.0f MB/s (%s)", l.MBPerSec, how)
	return l.MBPerSec, nil
}

func (b *runner) limitR(ctx context.Context, seed uint64) (float64, error) {
	l, err := limitRead(ctx, b.work, b.o.ReadFileBytes, seed)
	if err != nil {
		return 0, err
	}
	b.direct(l.Direct)
	b.s.add("limit_read_mb_per_s", l.MBPerSec)
	b.logf("limit: random 256 KiB read %.0f MB/s", l.MBPerSec)
	return l.MBPerSec, nil
}

// round is one round: each store run right after its limit's run.
func (b *runner) round(ctx context.Context, round int) error {
	o := b.o
	seed := o.Seed + uint64(round)*1000
	dir := func(name string) string { return b.dirOf(round, name) }

	// offload 256 KiB, then the reads over what it wrote
	lw, err := b.limitW(ctx)
	if err != nil {
		return err
	}
	l256 := Load{Prefix: "b256k", Keys: int(o.OffloadBytes / (256 << 10)), Value: 256 << 10, Writers: o.Writers, Batch: 16, Seed: seed}
	// The limit's batches: as many as the offload's, up to four per writer (enough for every
	// writer's batches to queue together on the device, as the offload's do), at least
	// LimitBytes' worth.
	perWriters := int64(l256.Writers) * int64(l256.Batch) * int64(l256.Value)
	lb, err := limitBatches(ctx, b.work, min(o.OffloadBytes, max(o.LimitBytes, 4*perWriters)), l256.Value, l256.Writers, l256.Batch)
	if err != nil {
		return err
	}
	b.direct(lb.Direct)
	b.s.add("limit_batch_p99_ms", float64(lb.P99.Microseconds())/1000)
	b.logf("limit: %d writers x batches of %d x 256 KiB, each fdatasync'd: %.0f MB/s, p99 %.1f ms per batch", l256.Writers, l256.Batch, lb.MBPerSec, float64(lb.P99.Microseconds())/1000)
	kv, err := openStore(ctx, dir("kv256k"))
	if err != nil {
		return err
	}
	off, err := Offload(ctx, kv, l256)
	if err != nil {
		_ = kv.Close()
		return err
	}
	b.s.add("offload_mb_per_s", off.MBPerSec)
	b.s.addRatio("offload_ratio", off.MBPerSec, lw)
	b.s.add("offload_p99_ms", float64(off.P99.Microseconds())/1000)
	b.s.addRatio("offload_p99_ratio", off.P99.Seconds(), lb.P99.Seconds())
	b.logf("offload 256 KiB: %.0f MB/s, p99 %.1f ms per batch", off.MBPerSec, float64(off.P99.Microseconds())/1000)
	var embeddedGet float64
	for _, rd := range []struct {
		name            string
		readers, batch  int
		mbName, ratName string
	}{{"32 readers x 16", 32, 16, "get_mb_per_s", "get_ratio"}, {"1 reader x 64", 1, 64, "get_one_reader_mb_per_s", "get_one_reader_ratio"}} {
		lr, err := b.limitR(ctx, seed+1)
		if err != nil {
			_ = kv.Close()
			return err
		}
		b.drop()
		g, err := readAll(ctx, kv, read{Keys: l256.keys(), Readers: rd.readers, Batch: rd.batch, Seed: seed})
		if err != nil {
			_ = kv.Close()
			return err
		}
		b.s.add(rd.mbName, g.MBPerSec)
		if rd.readers > 1 {
			embeddedGet = g.MBPerSec
		}
		b.s.addRatio(rd.ratName, g.MBPerSec, lr)
		if rd.readers == 1 {
			b.s.add("get_one_reader_p99_ms", float64(g.P99.Microseconds())/1000)
		}
		b.logf("BatchGet %s: %.0f MB/s", rd.name, g.MBPerSec)
	}
	if err := b.closeStore(kv, dir("kv256k")); err != nil {
		return err
	}
	// The served paths run half the keys (still 256 batches in the full run): their figures
	// are ratios of rates to the embedded node's, and the full sizes took a third of a round.
	// Never fewer than a batch per writer, so that they run as many writers as it (--quick).
	half := l256
	half.Keys = min(l256.Keys, max(l256.Keys/2, l256.Writers*l256.Batch))
	if err := b.served(ctx, "local", "local path", serveLocal, dir("local256k"), half, off.MBPerSec, embeddedGet); err != nil {
		return err
	}
	if err := b.served(ctx, "stream", "stream path (loopback TCP)", serveStream, dir("stream256k"), half, off.MBPerSec, embeddedGet); err != nil {
		return err
	}

	// offload 2 MiB
	if lw, err = b.limitW(ctx); err != nil {
		return err
	}
	l2m := Load{Prefix: "b2m", Keys: int(o.Offload2MBytes / (2 << 20)), Value: 2 << 20, Writers: o.Writers, Batch: 16, Seed: seed}
	off2, err := b.offloadFresh(ctx, dir("kv2m"), l2m)
	if err != nil {
		return err
	}
	b.s.add("offload_2m_mb_per_s", off2.MBPerSec)
	b.s.addRatio("offload_2m_ratio", off2.MBPerSec, lw)
	b.logf("offload 2 MiB: %.0f MB/s", off2.MBPerSec)

	// the peers, on the 256 KiB workload
	if lw, err = b.limitW(ctx); err != nil {
		return err
	}
	fs, err := openFileSink(dir("files"))
	if err != nil {
		return err
	}
	fp, err := Offload(ctx, fs, l256)
	if err != nil {
		return err
	}
	_ = os.RemoveAll(dir("files"))
	b.s.add("file_per_block_mb_per_s", fp.MBPerSec)
	b.s.addRatio("file_per_block_ratio", fp.MBPerSec, lw)
	b.s.addRatio("offload_over_file_per_block", off.MBPerSec, fp.MBPerSec)
	b.logf("one file per block: %.0f MB/s", fp.MBPerSec)
	if o.PebbleBin != "" {
		if lw, err = b.limitW(ctx); err != nil {
			return err
		}
		pb, err := runPebble(ctx, o.PebbleBin, dir("pebble"), l256)
		_ = os.RemoveAll(dir("pebble"))
		if err != nil {
			return err
		}
		b.s.add("pebble_mb_per_s", pb.MBPerSec)
		b.s.addRatio("pebble_ratio", pb.MBPerSec, lw)
		b.logf("pebble: %.0f MB/s", pb.MBPerSec)
	}

	// 4 KiB objects both ways
	lwi, err := limitWriteIOPS(ctx, b.work, o.IOPSFileBytes, o.IOPSOps, seed+2)
	if err != nil {
		return err
	}
	b.direct(lwi.Direct)
	b.s.add("limit_write_iops", lwi.IOPS)
	b.logf("limit: random 4 KiB write %.0f IOPS", lwi.IOPS)
	kv, err = openStore(ctx, dir("kv4k"))
	if err != nil {
		return err
	}
	l4k := Load{Prefix: "b4k", Keys: o.SmallKeys, Value: 4096, Writers: o.Writers, Batch: 256, Seed: seed}
	sm, err := Offload(ctx, kv, l4k)
	if err != nil {
		_ = kv.Close()
		return err
	}
	b.s.add("small_offload_keys_per_s", sm.KeysPerS)
	b.s.addRatio("small_offload_ratio", sm.KeysPerS, lwi.IOPS)
	b.logf("offload 4 KiB: %.0f keys/s", sm.KeysPerS)
	lri, err := limitReadIOPS(ctx, b.work, o.IOPSFileBytes, o.IOPSOps, seed+3)
	if err != nil {
		_ = kv.Close()
		return err
	}
	b.direct(lri.Direct)
	b.s.add("limit_read_iops", lri.IOPS)
	b.logf("limit: random 4 KiB read %.0f IOPS", lri.IOPS)
	b.drop()
	sg, err := readAll(ctx, kv, read{Keys: l4k.keys(), Readers: o.Writers, Batch: 256, Seed: seed})
	if err != nil {
		_ = kv.Close()
		return err
	}
	b.s.add("small_get_keys_per_s", sg.KeysPerS)
	b.s.addRatio("small_get_ratio", sg.KeysPerS, lri.IOPS)
	b.logf("BatchGet 4 KiB: %.0f keys/s", sg.KeysPerS)
	if err := b.closeStore(kv, dir("kv4k")); err != nil {
		return err
	}

	// metadata commits
	cm, err := b.offloadFresh(ctx, dir("kv64"), Load{Prefix: "b64", Keys: o.CommitKeys, Value: 64, Writers: o.Writers, Batch: 256, Seed: seed})
	if err != nil {
		return err
	}
	b.s.add("commit_keys_per_s", cm.KeysPerS)
	b.logf("commits of 64-byte objects: %.0f keys/s", cm.KeysPerS)
	return nil
}

// dirOf is the directory of the store run name in round, under the bench's work directory.
func (b *runner) dirOf(round int, name string) string {
	return filepath.Join(b.work, fmt.Sprintf("r%d-%s", round, name))
}

// served runs the 256 KiB offload and the 32-reader BatchGet through a client, in a child
// process (served.go), of a node served in this process (the local path, or the stream path
// over loopback TCP: open) and records each figure, under the names
// prefix+"_offload_mb_per_s", prefix+"_offload_over_embedded", prefix+"_get_mb_per_s" and
// prefix+"_get_over_embedded", with each ratio to the embedded node's in the same round
// (docs/benchmarks.md describes each figure).
func (b *runner) served(ctx context.Context, prefix, what string, open func(context.Context, string) (*servedNode, error),
	dir string, l Load, embeddedOffload, embeddedGet float64) error {
	sn, err := open(ctx, dir)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	defer sn.Close()
	off, err := runServed(ctx, servedJob{Addr: sn.addr, Load: l})
	if err != nil {
		return err
	}
	b.s.add(prefix+"_offload_mb_per_s", off.MBPerSec)
	b.s.addRatio(prefix+"_offload_over_embedded", off.MBPerSec, embeddedOffload)
	b.drop()
	g, err := runServed(ctx, servedJob{Addr: sn.addr, Get: true, Load: l, Readers: 32, Batch: 16})
	if err != nil {
		return err
	}
	b.s.add(prefix+"_get_mb_per_s", g.MBPerSec)
	b.s.addRatio(prefix+"_get_over_embedded", g.MBPerSec, embeddedGet)
	b.logf("%s, client in another process: offload 256 KiB %.0f MB/s (%.2fx embedded), BatchGet %.0f MB/s (%.2fx embedded)",
		what, off.MBPerSec, off.MBPerSec/embeddedOffload, g.MBPerSec, g.MBPerSec/max(embeddedGet, 1e-9))
	return nil
}

// offloadFresh runs l on a node in a fresh dir, then closes it and removes dir.
func (b *runner) offloadFresh(ctx context.Context, dir string, l Load) (Rate, error) {
	kv, err := openStore(ctx, dir)
	if err != nil {
		return Rate{}, err
	}
	r, err := Offload(ctx, kv, l)
	if cerr := b.closeStore(kv, dir); err == nil {
		err = cerr
	}
	return r, err
}

func (b *runner) closeStore(kv *kvStore, dir string) error {
	err := kv.Close()
	_ = os.RemoveAll(dir)
	return err
}

// filesystem names dir's filesystem type and reports tmpfs.
func filesystem(dir string) (string, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown", false
	}
	switch st.Type {
	case unix.TMPFS_MAGIC:
		return "tmpfs", true
	case unix.EXT4_SUPER_MAGIC:
		return "ext4", false
	case unix.XFS_SUPER_MAGIC:
		return "xfs", false
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs", false
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs", false
	}
	return fmt.Sprintf("0x%x", st.Type), false
}
