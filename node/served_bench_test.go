package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// BenchmarkServedGet is the bench's 32-reader BatchGet (batches of 16 x 256 KiB, O_DIRECT, so
// the page cache plays no part) through the embedded node, a client on the local path
// (unix:// and shared memory) and a client on the stream path (gRPC over loopback TCP), one
// after another on the same node and keys, each for b.N batches. It reports each path's MB/s
// and its ratio to the embedded node's in the same run (issue 10's targets: 0.90x local,
// 0.75x stream); the sub-benchmark "into" reads with BatchGetInto into buffers each reader
// reuses, as an engine with its own memory does.
func BenchmarkServedGet(b *testing.B) {
	b.Run("fresh", func(b *testing.B) { benchServedGet(b, false) })
	b.Run("into", func(b *testing.B) { benchServedGet(b, true) })
}

func benchServedGet(b *testing.B, into bool) {
	const readers, batch, block, keys = 32, 16, 256 << 10, 2048
	sock, err := os.MkdirTemp("", "kvb")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(sock)
	cfg := DefaultConfig(b.TempDir())
	cfg.APIAddr = "127.0.0.1:0"
	cfg.Local.Socket = filepath.Join(sock, "s")
	n, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	names := make([]string, keys)
	for start := 0; start < keys; start += batch {
		objs := make([]kvoffload.Object, 0, batch)
		for i := start; i < start+batch; i++ {
			names[i] = fmt.Sprintf("served@%d", i)
			objs = append(objs, kvoffload.Object{Key: names[i], Value: trace.Payload(1, names[i], block)})
		}
		if _, err := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objs); err != nil {
			b.Fatal(err)
		}
	}
	dial := func(addr string) kvoffload.Store {
		c, err := client.Dial(context.Background(), addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	paths := []struct {
		name string
		s    kvoffload.Store
	}{{"embedded", n}, {"local", dial("unix://" + cfg.Local.Socket)}, {"stream", dial(n.APIAddr())}}
	rates := map[string]float64{}
	b.ResetTimer()
	for _, p := range paths {
		start := time.Now()
		readBatches(b, readers, b.N, 2, func(rng *rand.Rand, bufs [][]byte) ([]kvoffload.GetResult, error) {
			first := rng.IntN(keys - batch + 1)
			if into {
				return p.s.BatchGetInto(context.Background(), names[first:first+batch], bufs)
			}
			return p.s.BatchGet(context.Background(), names[first:first+batch])
		}, batch, block)
		rates[p.name] = float64(int64(b.N)*batch*block) / 1e6 / time.Since(start).Seconds()
	}
	b.StopTimer()
	for _, p := range paths {
		b.ReportMetric(rates[p.name], p.name+"_MB/s")
	}
	b.ReportMetric(rates["local"]/rates["embedded"], "local_x_embedded")
	b.ReportMetric(rates["stream"]/rates["embedded"], "stream_x_embedded")
}
