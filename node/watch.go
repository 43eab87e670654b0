package node

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// DefaultWatchRetain is the events a node retains for consumers to resume from when
// Config.WatchRetain is 0 (~100 bytes each plus the key: ~10 MiB with 64-byte keys).
const DefaultWatchRetain = 1 << 16

// DefaultMaxWatchers is the concurrent WatchEvents streams a node serves when
// Config.MaxWatchers is 0.
const DefaultMaxWatchers = 64

// WatchEvents serves the event stream (internal/watch).
func (s kvService) WatchEvents(req *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchResponse]) error {
	return s.n.watch.Serve(req, stream)
}

// watchNode is what the event stream needs of the node (watch.Node).
type watchNode struct{ n *Node }

func (w watchNode) Ready(ctx context.Context) error { return w.n.waitReady(ctx) }
func (w watchNode) LastIndex() uint64               { return w.n.raft.Raft().LastIndex() }
func (w watchNode) Idle() time.Duration             { return w.n.streamIdle() }
func (w watchNode) Closing() <-chan struct{}        { return w.n.closing }

// ReadIndex returns once this node has applied every command committed before the call.
func (w watchNode) ReadIndex(ctx context.Context) error {
	if w.n.leader == nil {
		return nil // embedded: the only replica, every commit is applied before it is answered
	}
	return grpcError(w.n.leader.ReadIndex(ctx))
}

// watchCollector exports the event stream's state at scrape time.
type watchCollector struct{ n *Node }

func (c watchCollector) Describe(ch chan<- *prometheus.Desc) { c.n.watch.Describe(ch) }
func (c watchCollector) Collect(ch chan<- prometheus.Metric) { c.n.watch.Collect(ch) }
