package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/cluster"
	"github.com/kvoffload/kvoffload/internal/forward"
	"github.com/kvoffload/kvoffload/internal/nodehook"
	"github.com/kvoffload/kvoffload/internal/watch"
	"github.com/kvoffload/kvoffload/raftmeta"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/wal"
)

// ErrLocked is returned when another process holds the data directory.
var ErrLocked = errors.New("node: data directory is in use by another process")

// ErrRemoved is returned by Open for a node that was removed from its cluster (Leave): its
// data directory belongs to a former member and is not reused, and the node does not join
// again (docs/operations.md).
var ErrRemoved = cluster.ErrRemoved

// ErrClusterMismatch is returned by Open for a node asked to join another cluster than the
// one its data directory belongs to.
var ErrClusterMismatch = cluster.ErrClusterMismatch

// ErrNodeIDMismatch is returned by Open for a node ID other than the one its data directory
// belongs to.
var ErrNodeIDMismatch = cluster.ErrNodeIDMismatch

// Node is one running kvoffload node.
type Node struct {
	cfg     Config
	log     *slog.Logger
	lock    *os.File
	wal     *wal.Log
	buckets *bucketstore.Store
	fsm     *fsm.FSM
	raft    *raftmeta.Node
	// raftOpened is raft, for Healthy, which may run while Open is still opening it.
	raftOpened atomic.Pointer[raftmeta.Node]
	member     *cluster.Member // membership, identity and peer security
	idleLimit  atomic.Int64    // streamIdle for tests; 0: streamIdleTimeout
	coord      *txn.Coordinator
	peers      *forward.Peers
	leader     *forward.Leader // cluster mode only
	metrics    *metrics
	server     *grpc.Server // the client API
	listener   net.Listener
	health     *health.Server
	// peerServer serves the Cluster service on peerListener (cluster mode only).
	peerServer   *grpc.Server
	peerListener net.Listener
	// localServer serves gRPC on the local socket, localListener, whose registration
	// connections map the regions (Config.Local; nil without a local socket).
	localServer   *grpc.Server
	localListener *muxListener
	regions       *regions
	// payloadIn counts the payload bytes offloads brought to this node over the API (gRPC
	// chunks, or copies out of local regions): Stats counter "payload_bytes_received".
	payloadIn atomic.Uint64
	// nodeIDPending: the data directory records no node ID yet (it predates NODE_ID); Open
	// records this node's once the node has started.
	nodeIDPending bool
	ready         chan struct{} // closed when recovery has finished
	closing       chan struct{}
	repair        wal.RepairReport
	recovery      txn.RecoveryReport
	watch         *watch.Service // the WatchEvents streams (watch.go)
}

// Open opens (or creates) the node in cfg.DataDir, joins or bootstraps its cluster, and runs
// recovery. In cluster mode the gRPC API is served from the start (requests wait until
// recovery has finished). On error everything opened so far is closed again.
//
// The steps: construction (newNode), the data directory (openStores), then the steps of the
// mode, startEmbedded or startMember (member.go), each ending with recovery; then the
// node is ready.
func Open(ctx context.Context, cfg Config) (_ *Node, err error) {
	n, err := newNode(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = n.Close()
		}
	}()
	fresh, err := n.openStores()
	if err != nil {
		return nil, err
	}
	start := n.startEmbedded
	if cfg.cluster() {
		start = n.startMember
	}
	if err := start(ctx, fresh); err != nil {
		return nil, err
	}
	if n.nodeIDPending {
		if err := cluster.RecordNodeID(n.cfg.DataDir, n.cfg.ID); err != nil {
			n.log.Warn("could not record the node ID in the data directory; the next start tries again", "err", err)
		}
	}
	close(n.ready)
	if n.health != nil && n.coord.Usable() == nil {
		n.setServing(healthpb.HealthCheckResponse_SERVING)
		if n.coord.Usable() != nil {
			n.notServing() // it stopped between the check and SERVING; notServing may have run first
		}
	}
	go n.pruneLoop()
	go n.spaceLoop()
	n.warnSpace()
	if n.cfg.cluster() {
		go n.member.WatchRemoval()
	}
	procs := runtime.GOMAXPROCS(0)
	n.log.Info("node ready", "api", n.APIAddr(), "peer", n.PeerAddr(), "raft", cfg.RaftAddr, "tls", n.member.TLS(), "cluster", n.ClusterID(), "gomaxprocs", procs)
	if procs < MinProcs {
		n.log.Info("few Go Ps for the store's blocking disk I/O: on 2 cores, 4 Ps made commits ~25% faster (docs/operations.md); set GOMAXPROCS=4", "gomaxprocs", procs)
	}
	return n, nil
}

// newNode checks cfg, loads the TLS material and builds the node's parts that open nothing.
func newNode(cfg Config) (*Node, error) {
	if err := errors.Join(cfg.Validate(), cluster.CheckJoinAddrs(cfg.Join)); err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	n := &Node{cfg: cfg, log: lg.With("node", cfg.ID), ready: make(chan struct{}), closing: make(chan struct{})}
	sec := cfg.Security
	var err error
	n.member, err = cluster.New(cluster.Config{ID: cfg.ID, DataDir: cfg.DataDir, Join: cfg.Join, RaftAdvertise: cfg.raftAdvertise(),
		CertFile: sec.CertFile, KeyFile: sec.KeyFile, CAFile: sec.CAFile, MaxMsgBytes: maxMsgBytes(cfg.Txn),
		MaxRecordLen: cfg.Txn.MaxRecordLen(), Build: ReadBuild().String(), Logger: n.log, Closing: n.closing}, memberHost{n})
	if err != nil {
		return nil, err
	}
	n.peers = n.member.Peers()
	n.watch = watch.New(cfg.ID, cmp.Or(cfg.WatchRetain, DefaultWatchRetain), cmp.Or(cfg.MaxWatchers, DefaultMaxWatchers), watchNode{n})
	n.metrics = newMetrics(cfg.Registry, n)
	return n, nil
}

// startEmbedded starts a single node without a cluster: Raft bootstraps over an in-memory
// transport, the API is served if configured, and recovery runs once Raft leads.
// embeddedRaftTimeout is the Raft heartbeat and election timeout of an embedded single node.
// Raft refuses timeouts under 5 ms. A single voter's lease never lapses (it is its own
// quorum), so a short one costs a timer tick, not leadership under load.
const embeddedRaftTimeout = 10 * time.Millisecond

func (n *Node) startEmbedded(ctx context.Context, _ bool) (err error) {
	rcfg := n.raftConfig()
	rcfg.Bootstrap = true
	// The only voter, with no transport to anyone: no other node can start an election or
	// need a heartbeat, so the wait before it elects itself (HeartbeatTimeout, then
	// ElectionTimeout, each randomized up to twice) is pure start-up time. Cut them to
	// embeddedRaftTimeout: a start-up then waits about 20-40 ms instead of 0.5 to 1 s
	// (docs/benchmarks.md, start-up; 0.1 s at 50 ms).
	rcfg.HeartbeatTimeout, rcfg.ElectionTimeout = embeddedRaftTimeout, embeddedRaftTimeout
	rcfg.LeaderLeaseTimeout = min(rcfg.LeaderLeaseTimeout, embeddedRaftTimeout)
	if err := n.openRaft(rcfg); err != nil {
		return err
	}
	if err := n.openCoordinator(forward.Meta(n.raft, n.fsm, nil)); err != nil {
		return err
	}
	if n.cfg.APIAddr != "" || n.cfg.Local.Socket != "" {
		if err := n.serve(); err != nil {
			return err
		}
	}
	if err := n.raft.WaitLeader(ctx); err != nil {
		return fmt.Errorf("node: waiting for a Raft leader: %w", err)
	}
	n.recovery, err = n.coord.Recover(ctx)
	return err
}

// openStores locks the data directory and opens the bucket store and the WAL. fresh reports
// that the node had no Raft state yet.
func (n *Node) openStores() (fresh bool, err error) {
	cfg := n.cfg
	if n.lock, err = lockDir(cfg.DataDir); err != nil {
		return false, err
	}
	_, statErr := os.Stat(filepath.Join(cfg.DataDir, "raft", "raft.db"))
	fresh = errors.Is(statErr, os.ErrNotExist)
	cluster.RemoveUnfinishedIDWrites(cfg.DataDir, n.log)
	recorded, err := cluster.CheckNodeID(cfg.DataDir, cfg.ID, fresh) // before anything in the directory is opened
	if err != nil {
		return false, err
	}
	n.nodeIDPending = !recorded
	bcfg := bucketstore.DefaultConfig(filepath.Join(cfg.DataDir, "buckets"))
	bcfg.FS, bcfg.BucketSize, bcfg.Capacity, bcfg.Logger = cfg.FS, cfg.BucketSize, cfg.Capacity, n.log
	bcfg.Reserve = n.spaceReserve()
	if n.buckets, err = bucketstore.Open(bcfg); err != nil {
		return false, fmt.Errorf("node: %w", err)
	}
	wcfg := wal.DefaultConfig(filepath.Join(cfg.DataDir, "wal"))
	wcfg.Logger = n.log
	if n.wal, n.repair, err = wal.Open(wcfg); err != nil {
		return false, fmt.Errorf("node: %w", err)
	}
	return fresh, nil
}

// raftConfig is the Raft configuration both modes share.
func (n *Node) raftConfig() raftmeta.Config {
	rcfg := raftmeta.DefaultConfig(n.cfg.ID, filepath.Join(n.cfg.DataDir, "raft"))
	// raftmeta and txn name the node in their records themselves: they take cfg.Logger, not n.log.
	rcfg.Logger, rcfg.BindAddr, rcfg.AdvertiseAddr = n.cfg.Logger, n.cfg.RaftAddr, n.cfg.RaftAdvertise
	rcfg.SnapshotThreshold, rcfg.TrailingLogs = n.cfg.SnapshotThreshold, n.cfg.TrailingLogs
	rcfg.OnLogFault = n.raftLogFault
	return rcfg
}

// openRaft opens the metadata: a new FSM, and Raft over it with rcfg.
func (n *Node) openRaft(rcfg raftmeta.Config) error {
	n.fsm = fsm.New()
	n.watch.Attach(n.fsm)
	var err error
	if n.raft, err = raftmeta.Open(rcfg, n.fsm); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.raftOpened.Store(n.raft)
	n.member.Attach(n.raft, n.fsm)
	return nil
}

// streamIdleTimeout is the longest an offload stream may go without a message, and a
// BatchGet stream without its client taking one. A stream that announces objects and then
// stops sending, or a reader that stops reading, would otherwise hold its share of the buffer
// budget (internal/membudget) for as long as its client keeps the connection open, and a few
// such streams would hold all of it (TestIdleOffloadStreamEnds,
// TestIdleReaderLosesItsStream). A client streams values it already has and reads what it
// asked for, so a live client is never this slow.
const streamIdleTimeout = 30 * time.Second

// streamIdle is the idle limit of an offload stream (streamIdleTimeout; tests shorten it).
func (n *Node) streamIdle() time.Duration {
	if d := n.idleLimit.Load(); d > 0 {
		return time.Duration(d)
	}
	return streamIdleTimeout
}

// openCoordinator opens the transaction coordinator over m, the metadata as this node's
// mode sees it, and has it watch the FSM.
func (n *Node) openCoordinator(m txn.Meta) error {
	tcfg := n.cfg.Txn
	tcfg.NodeID, tcfg.Logger, tcfg.Capacity = n.cfg.ID, n.cfg.Logger, n.cfg.Capacity
	var err error
	if n.coord, err = txn.New(tcfg, n.wal, n.buckets, m); err != nil {
		return err
	}
	n.fsm.Watch(n.coord.OnApplied)
	n.fsm.WatchRestore(n.coord.OnRestored)
	n.coord.OnUnusable(func(error) { n.notServing() })
	return nil
}

// MinProcs is the fewest Go Ps (GOMAXPROCS) a node should run with, whatever the core count
// (the package doc, "Go Ps"): storenode raises GOMAXPROCS to it, and Open logs a hint below it.
const MinProcs = 4

// notServing turns the gRPC health NOT_SERVING once the coordinator has stopped serving for
// good (a fail-stop, a removal), as /healthz then fails. Before the node is ready the status
// is NOT_SERVING already, and Open does not turn it SERVING for an unusable coordinator.
func (n *Node) notServing() {
	select {
	case <-n.ready:
		if n.health != nil {
			n.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
		}
	default:
	}
}

func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("node: locking %s: %w", dir, err)
	}
	return f, nil
}

// Close shuts the node down at once: the API stops, background work stops, Raft shuts down,
// files are closed. Transactions still running fail or are resolved by the next recovery.
// Use Shutdown for a graceful stop.
func (n *Node) Close() error {
	select {
	case <-n.closing:
		return nil
	default:
		close(n.closing)
	}
	if n.server != nil {
		n.server.Stop()
	}
	if n.peerServer != nil {
		n.peerServer.Stop()
	}
	if n.localServer != nil {
		n.localServer.Stop()
	}
	if n.localListener != nil {
		_ = n.localListener.Close()
	}
	if n.regions != nil {
		n.regions.closeAll()
	}
	var errs []error
	if n.coord != nil {
		errs = append(errs, n.coord.Close())
	}
	if n.raft != nil {
		errs = append(errs, n.raft.Close())
	}
	n.peers.Close()
	if n.wal != nil {
		errs = append(errs, n.wal.Close())
	}
	if n.buckets != nil {
		errs = append(errs, n.buckets.Close())
	}
	if n.lock != nil {
		errs = append(errs, n.lock.Close())
	}
	return errors.Join(errs...)
}

func init() {
	nodehook.Of = func(x any) nodehook.Parts {
		n := x.(*Node)
		return nodehook.Parts{FSM: n.fsm, Buckets: n.buckets, Raft: n.raft, Repair: n.repair, Recovery: n.recovery}
	}
}

// Snapshot forces a Raft snapshot (and log compaction).
func (n *Node) Snapshot() error { return n.raft.Snapshot() }

// layerStats is a point-in-time view of the node's layers, for the metrics and tests (Stats is the
// Store's view).
type layerStats struct {
	Txn     txn.Stats
	Meta    fsm.Stats
	Buckets bucketstore.Stats
	WAL     wal.Stats
}

// layerStats returns the counters and space accounting of the node's layers (for Stats and
// the metrics).
func (n *Node) layerStats() (layerStats, error) {
	bs, err := n.buckets.Stats()
	return layerStats{Txn: n.coord.Stats(), Meta: n.fsm.Stats(), Buckets: bs, WAL: n.wal.Stats()}, err
}
