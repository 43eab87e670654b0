package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/raftmeta"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/wal"
)

// ErrLocked is returned when another process holds the data directory.
var ErrLocked = errors.New("node: data directory is in use by another process")

// ErrRemoved is returned by Open for a node that was removed from its cluster (Leave): its
// data directory belongs to a former member and is not reused, and the node does not join
// again (docs/operations.md).
var ErrRemoved = errors.New("node: removed from the cluster")

// Node is one running kvoffload node.
type Node struct {
	cfg     Config
	log     *slog.Logger
	lock    *os.File
	wal     *wal.Log
	buckets *bucketstore.Store
	fsm     *fsm.FSM
	raft    *raftmeta.Node
	// raftAdmit is raft for the Raft listener's admission check, which runs on connections
	// accepted while raftmeta.Open is still returning.
	raftAdmit atomic.Pointer[raftmeta.Node]
	// clusterID is the cluster ID of the data directory (identity.go); nil until known.
	clusterID atomic.Pointer[string]
	idleLimit atomic.Int64 // streamIdle for tests; 0: streamIdleTimeout
	coord     *txn.Coordinator
	peers     *peers
	metrics   *metrics
	tls       *tlsMaterial // nil without TLS
	server    *grpc.Server // the client API
	listener  net.Listener
	health    *health.Server
	// peerServer serves the Cluster service on peerListener (cluster mode only).
	peerServer   *grpc.Server
	peerListener net.Listener
	ready        chan struct{} // closed when recovery has finished
	closing      chan struct{}
	repair       wal.RepairReport
	recovery     txn.RecoveryReport
}

// Open opens (or creates) the node in cfg.DataDir, joins or bootstraps its cluster, and runs
// recovery. In cluster mode the gRPC API is served from the start (requests wait until
// recovery has finished). On error everything opened so far is closed again.
func Open(ctx context.Context, cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tm, err := loadTLS(cfg.Security, cfg.ID)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: lg.With("node", cfg.ID), tls: tm,
		ready: make(chan struct{}), closing: make(chan struct{})}
	n.peers = newPeers(tm, n.ClusterID)
	n.metrics = newMetrics(cfg.Registry, n)
	defer func() {
		if err != nil {
			_ = n.Close()
		}
	}()
	fresh, err := n.openStores()
	if err != nil {
		return nil, err
	}
	if cfg.RaftAddr != "" {
		if err := n.openClusterID(fresh); err != nil {
			return nil, err
		}
	}
	if err := n.openRaft(cfg.RaftAddr == "" || len(cfg.Join) == 0); err != nil {
		return nil, err
	}
	if err := n.openCoordinator(); err != nil {
		return nil, err
	}
	if cfg.APIAddr != "" {
		if err := n.serve(); err != nil {
			return nil, err
		}
	}
	unlisted := false
	if cfg.RaftAddr != "" && !fresh {
		// Raft state exists. Sampled before the configuration: a leader may be replicating
		// to this node right now, and the entry listing it comes after the first ones.
		last := n.raft.Raft().LastIndex()
		if !n.inConfiguration() {
			if last == 0 {
				// No leader ever sent this node an entry (a leader replicates only to its
				// members): an earlier join never completed, so it joins again.
				fresh = true
			} else {
				// It was a member once and is not listed now: removed (see waitLeader).
				// Joining again would undo the Leave.
				unlisted = true
			}
		}
	}
	if cfg.RaftAddr != "" && len(cfg.Join) > 0 && fresh {
		if err := n.join(ctx); err != nil {
			return nil, err
		}
	} else if cfg.RaftAddr != "" && len(cfg.Join) > 0 {
		if err := n.checkJoinIgnored(ctx); err != nil {
			return nil, err
		}
	}
	if err = n.waitLeader(ctx, unlisted); err != nil {
		return nil, err
	}
	if cfg.RaftAddr != "" && fresh {
		if err := n.checkNoPriorKeys(ctx); err != nil {
			return nil, err
		}
	}
	if n.recovery, err = n.coord.Recover(ctx); err != nil {
		return nil, err
	}
	if cfg.RaftAddr != "" {
		if err := n.checkReplicatedClusterID(); err != nil {
			return nil, err
		}
	}
	close(n.ready)
	if n.health != nil {
		n.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	}
	go n.pruneLoop()
	n.log.Info("node ready", "api", n.APIAddr(), "peer", n.PeerAddr(), "raft", cfg.RaftAddr, "tls", tm != nil, "cluster", n.ClusterID())
	return n, nil
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
	bcfg := bucketstore.DefaultConfig(filepath.Join(cfg.DataDir, "buckets"))
	bcfg.FS, bcfg.BucketSize, bcfg.Capacity, bcfg.Logger = cfg.FS, cfg.BucketSize, cfg.Capacity, n.log
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

func (n *Node) openRaft(bootstrap bool) error {
	n.fsm = fsm.New()
	rcfg := raftmeta.DefaultConfig(n.cfg.ID, filepath.Join(n.cfg.DataDir, "raft"))
	rcfg.Bootstrap, rcfg.Logger, rcfg.BindAddr, rcfg.AdvertiseAddr = bootstrap, n.log, n.cfg.RaftAddr, n.cfg.RaftAdvertise
	rcfg.SnapshotThreshold, rcfg.TrailingLogs = n.cfg.SnapshotThreshold, n.cfg.TrailingLogs
	if n.cfg.RaftAddr != "" {
		rcfg.TLS = n.tls.raft(n.admitRaftPeer)
		rcfg.ClusterID = n.ClusterID
	}
	var err error
	if n.raft, err = raftmeta.Open(rcfg, n.fsm); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.raftAdmit.Store(n.raft)
	return nil
}

// streamIdle is the idle limit of an offload stream (streamIdleTimeout; tests shorten it).
func (n *Node) streamIdle() time.Duration {
	if d := n.idleLimit.Load(); d > 0 {
		return time.Duration(d)
	}
	return streamIdleTimeout
}

// openClusterID reads the data directory's cluster ID; a node that bootstraps a new cluster
// (fresh, no Join) makes one.
func (n *Node) openClusterID(fresh bool) error {
	id, err := readClusterID(n.cfg.DataDir)
	if err != nil {
		return err
	}
	if id == "" && fresh && len(n.cfg.Join) == 0 {
		id = newClusterID()
	}
	if id == "" {
		return nil // learned from the Join reply, or from the metadata after catch-up
	}
	return n.adoptClusterID(id)
}

// admitRaftPeer accepts a Raft connection from node id when the Raft configuration lists it,
// or while this node knows no configuration yet (a fresh node being added: the leader, which
// it does not know yet, is the first to dial it).
func (n *Node) admitRaftPeer(id string) error {
	r := n.raftAdmit.Load()
	if r == nil {
		return nil // raft is starting: no configuration to check against yet
	}
	servers, err := r.Servers()
	if err != nil || len(servers) == 0 {
		return nil
	}
	for _, sv := range servers {
		if sv.ID == id {
			return nil
		}
	}
	n.log.Warn("raft connection refused: not in the configuration", "peer", id)
	return fmt.Errorf("node: raft: %q is not in this node's Raft configuration", id)
}

func (n *Node) openCoordinator() error {
	tcfg := n.cfg.Txn
	tcfg.NodeID, tcfg.Logger, tcfg.Capacity = n.cfg.ID, n.log, n.cfg.Capacity
	var m txn.Meta = meta{n.raft, n.fsm}
	if n.cfg.RaftAddr != "" {
		m = n.cmeta()
	}
	var err error
	if n.coord, err = txn.New(tcfg, n.wal, n.buckets, m); err != nil {
		return err
	}
	n.fsm.Watch(n.coord.OnApplied)
	n.fsm.WatchRestore(n.coord.OnRestored)
	if n.cfg.RaftAddr != "" {
		n.coord.SetRemote(remoteReader{f: n.fsm, peers: n.peers})
		n.raft.OnLeader(n.announce)
	}
	return nil
}

func (n *Node) cmeta() clusterMeta {
	return clusterMeta{meta: meta{n.raft, n.fsm}, peers: n.peers, id: n.cfg.ID}
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
	var errs []error
	if n.coord != nil {
		errs = append(errs, n.coord.Close())
	}
	if n.raft != nil {
		errs = append(errs, n.raft.Close())
	}
	n.peers.close()
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

// BatchOffload stores objs as one transaction; see txn.Coordinator.BatchOffload.
func (n *Node) BatchOffload(ctx context.Context, id fsm.TxnID, objs []txn.Object) ([]txn.KeyResult, error) {
	return n.coord.BatchOffload(ctx, id, objs)
}

// BatchGet reads keys with verification; see txn.Coordinator.BatchGet.
func (n *Node) BatchGet(ctx context.Context, keys []string) ([]txn.GetResult, error) {
	return n.coord.BatchGet(ctx, keys)
}

// BatchExists reports which keys are present; see txn.Coordinator.BatchExists.
func (n *Node) BatchExists(ctx context.Context, keys []string) txn.ExistsResult {
	return n.coord.BatchExists(ctx, keys)
}

// BatchExistsLease reports which keys are present and pins the local ones against eviction
// for lease; see txn.Coordinator.BatchExistsLease.
func (n *Node) BatchExistsLease(ctx context.Context, keys []string, lease time.Duration) txn.ExistsResult {
	return n.coord.BatchExistsLease(ctx, keys, lease)
}

// Remove deletes keys; see txn.Coordinator.Remove.
func (n *Node) Remove(ctx context.Context, keys []string) ([]txn.RemoveResult, error) {
	return n.coord.Remove(ctx, keys)
}

// Recovery returns what start-up repaired in the WAL and resolved in recovery.
func (n *Node) Recovery() (wal.RepairReport, txn.RecoveryReport) { return n.repair, n.recovery }

// FSM exposes the metadata state (read-only use: checks and tools).
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// Buckets exposes the bucket store (read-only use: checks and tools).
func (n *Node) Buckets() *bucketstore.Store { return n.buckets }

// Raft exposes the Raft node (status, tests).
func (n *Node) Raft() *raftmeta.Node { return n.raft }

// Snapshot forces a Raft snapshot (and log compaction).
func (n *Node) Snapshot() error { return n.raft.Snapshot() }

// Stats is a point-in-time view of the node.
type Stats struct {
	Txn     txn.Stats
	Meta    fsm.Stats
	Buckets bucketstore.Stats
	WAL     wal.Stats
}

// Stats returns the node's counters and space accounting.
func (n *Node) Stats() (Stats, error) {
	bs, err := n.buckets.Stats()
	return Stats{Txn: n.coord.Stats(), Meta: n.fsm.Stats(), Buckets: bs, WAL: n.wal.Stats()}, err
}

// meta joins the Raft proposer and the local FSM into txn.Meta.
type meta struct {
	r *raftmeta.Node
	f *fsm.FSM
}

func (m meta) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	return m.r.Propose(ctx, cmd)
}
func (m meta) Barrier(ctx context.Context) error          { return m.r.Barrier(ctx) }
func (m meta) ReadIndex(context.Context) error            { return nil } // the only replica
func (m meta) Lookup(key string) (fsm.Entry, bool)        { return m.f.Lookup(key) }
func (m meta) Generation(key string) uint64               { return m.f.Generation(key) }
func (m meta) TxnResult(id fsm.TxnID) (*fsm.Result, bool) { return m.f.TxnResult(id) }
func (m meta) ForEach(fn func(fsm.Entry) bool)            { m.f.ForEach(fn) }
