package bench

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/kvoffload/kvoffload/workload/replay"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// OnlyReplay is Options.Only (`storenode bench --only replay`): every round is the replay
// phase alone, and neither the limits, the synthetic workloads, the peers nor the start-up run.
const OnlyReplay = "replay"

// ReplayDefaults are `storenode replay`'s defaults with no flags (32 writers, 256 KiB blocks,
// the default model, payload seed 1; Ahead 0 is replay.DefaultAhead): the replay phase replays
// what an engine's mix looks like as that command does (cmd/storenode checks the match).
func ReplayDefaults() replay.Options {
	return replay.Options{Writers: 32, BlockSize: 256 << 10, Model: trace.DefaultModel, Seed: 1}
}

// replayTrace is what the replay phase replays: the shipped sample (storenode replay's
// default trace), or its first n requests when 0 < n < its length.
func replayTrace(n int) []trace.Request {
	reqs := trace.Sample()
	if n > 0 && n < len(reqs) {
		reqs = reqs[:n]
	}
	return reqs
}

// replayRound is the replay phase of one round: the trace replayed (written, then read back
// and verified, replay.Run) into an embedded node, the local path, the embedded node again and
// the stream path, in that order, each on a fresh directory, the served paths through a client
// in a child process (served.go), each served run recorded beside the embedded run just
// before it (addReplay).
func (b *runner) replayRound(ctx context.Context, round int) error {
	reqs := replayTrace(b.o.ReplayRequests)
	opt := b.o.Replay
	opt.Progress = nil
	for i, path := range []struct{ name, what string }{{"local", "local path"}, {"stream", "stream path (loopback TCP)"}} {
		dir := func(name string) string { return b.dirOf(round, fmt.Sprintf("replay%d-%s", i, name)) }
		emb, err := b.replayEmbedded(ctx, dir("embedded"), reqs, opt)
		if err != nil {
			return err
		}
		b.logf("replay of the sample (%d requests), embedded node: written %.0f MB/s, read back %.0f MB/s", len(reqs), emb.MBPerSec, emb.ReadMBPerSec)
		open := serveLocal
		if path.name == "stream" {
			open = serveStream
		}
		srv, err := b.replayServed(ctx, open, dir(path.name), reqs, opt)
		if err != nil {
			return err
		}
		b.s.addReplay(path.name, emb, srv)
		b.logf("replay of the sample, %s, client in another process: written %.0f MB/s (%.2fx embedded), read back %.0f MB/s (%.2fx embedded)",
			path.what, srv.MBPerSec, srv.MBPerSec/max(emb.MBPerSec, 1e-9), srv.ReadMBPerSec, srv.ReadMBPerSec/max(emb.ReadMBPerSec, 1e-9))
	}
	return nil
}

// addReplay records an embedded replay and the replay through path ("local" or "stream") run
// right after it: each one's written and read-back MB/s, under "replay_embedded_mb_per_s",
// "replay_embedded_get_mb_per_s", "replay_"+path+"_mb_per_s" and "replay_"+path+
// "_get_mb_per_s", and the served figures over the embedded ones, under "replay_"+path+
// "_over_embedded" and "replay_"+path+"_get_over_embedded" (docs/benchmarks.md).
func (s samples) addReplay(path string, emb, srv replay.Summary) {
	s.add("replay_embedded_mb_per_s", emb.MBPerSec)
	s.add("replay_embedded_get_mb_per_s", emb.ReadMBPerSec)
	s.add("replay_"+path+"_mb_per_s", srv.MBPerSec)
	s.addRatio("replay_"+path+"_over_embedded", srv.MBPerSec, emb.MBPerSec)
	s.add("replay_"+path+"_get_mb_per_s", srv.ReadMBPerSec)
	s.addRatio("replay_"+path+"_get_over_embedded", srv.ReadMBPerSec, emb.ReadMBPerSec)
}

// replayEmbedded replays reqs into an embedded node in the fresh directory dir, then closes the
// node and removes dir.
func (b *runner) replayEmbedded(ctx context.Context, dir string, reqs []trace.Request, opt replay.Options) (replay.Summary, error) {
	debug.FreeOSMemory() // the previous run's payloads are garbage: no run pays for another's collection
	kv, err := openStore(ctx, dir)
	if err != nil {
		return replay.Summary{}, err
	}
	sum, err := replay.Run(ctx, kv.target(), reqs, opt)
	if cerr := b.closeStore(kv, dir); err == nil {
		err = cerr
	}
	if err != nil {
		return sum, fmt.Errorf("bench: replay, embedded node: %w", err)
	}
	return sum, replayClean("embedded node", sum, len(reqs))
}

// replayServed replays reqs through a client, in a child process, of a node served in this
// process on the fresh directory dir (open: serveLocal or serveStream), then closes the node
// and removes dir.
func (b *runner) replayServed(ctx context.Context, open func(context.Context, string) (*servedNode, error),
	dir string, reqs []trace.Request, opt replay.Options) (replay.Summary, error) {
	debug.FreeOSMemory()
	sn, err := open(ctx, dir)
	if err != nil {
		return replay.Summary{}, err
	}
	defer os.RemoveAll(dir)
	defer sn.Close()
	sum, err := runServedReplay(ctx, servedJob{Addr: sn.addr, Replay: &opt, Requests: len(reqs)})
	if err != nil {
		return sum, err
	}
	return sum, replayClean(sn.addr, sum, len(reqs))
}

// replayClean is nil when sum is a whole replay of a fresh store: every request sent, every key
// accepted, every distinct key read back whole, and bytes written; else an error naming the
// first problem (the bench measures only stores that keep every key).
func replayClean(what string, sum replay.Summary, reqs int) error {
	switch {
	case sum.Requests != reqs || sum.Stopped || !sum.Verified:
		return fmt.Errorf("bench: replay into %s: %d of %d requests sent, verified %v: %s", what, sum.Requests, reqs, sum.Verified, sum.FirstProblem)
	case sum.Conflict+sum.Rejected+sum.Failed+sum.BatchErrors > 0:
		return fmt.Errorf("bench: replay into %s: %d conflict, %d rejected, %d failed, %d batch errors: %s",
			what, sum.Conflict, sum.Rejected, sum.Failed, sum.BatchErrors, sum.FirstProblem)
	case sum.Missing+sum.Corrupt+sum.Unavailable > 0:
		return fmt.Errorf("bench: replay into %s: %d keys missing, %d corrupt, %d unavailable: %s",
			what, sum.Missing, sum.Corrupt, sum.Unavailable, sum.FirstProblem)
	case sum.Bytes == 0 || sum.MBPerSec <= 0 || sum.ReadMBPerSec <= 0:
		return fmt.Errorf("bench: replay into %s wrote %d bytes (%.0f MB/s) and read back %.0f MB/s: a fresh store must take every distinct key",
			what, sum.Bytes, sum.MBPerSec, sum.ReadMBPerSec)
	}
	return nil
}
