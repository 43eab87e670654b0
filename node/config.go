package node

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvoffload/kvoffload/internal/wire"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/vfs"
)

// Config configures a node.
type Config struct {
	// ID names the node; it is recorded as the owner of the keys it stores. 1 to 255 bytes
	// (a forwarded proposal's result carries it with every key).
	ID string
	// DataDir holds the node's WAL, buckets and Raft state.
	DataDir string
	// FS is the filesystem for bucket files; nil means the OS with O_DIRECT.
	FS vfs.FS
	// BucketSize is the size in bytes at which a bucket file is sealed and a new one opened.
	BucketSize int64
	// Capacity is the quota in bytes on live bucket data; 0 means unlimited.
	Capacity int64
	// SpaceReserve is the free space in bytes of the data filesystem that bucket data never
	// takes, kept for the WAL, the Raft log and its snapshots: an offload that would take it
	// is Rejected with CodeNoSpace. 0 means sized from their limits (SpaceReserve, space.go;
	// docs/operations.md); negative means none.
	SpaceReserve int64
	// Txn holds the coordinator's limits (key, object and batch sizes, in-flight slots).
	Txn txn.Config
	// SnapshotThreshold and TrailingLogs tune Raft log compaction (entries).
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// RetainTxnResults is how many Raft log entries back the metadata keeps each
	// transaction's result (for exactly-once retries by txn ID); older results are pruned
	// through Raft by the leader. A retry arriving later is answered as a new transaction.
	RetainTxnResults uint64
	// RaftAddr is the host:port of the Raft TCP transport. Empty means an embedded single
	// node with an in-memory transport (no cluster).
	RaftAddr string
	// RaftAdvertise is the host:port other members dial to reach this node's Raft transport
	// (for example a proxy in front of it); empty means RaftAddr.
	RaftAdvertise string
	// APIAddr is the host:port the client API (KVOffload, gRPC health, reflection) listens
	// on; empty means no API server.
	APIAddr string
	// PeerAddr is the host:port the peer service (Cluster: Join, Leave, Propose, Barrier,
	// ReadIndex, ReadLocal, Status) listens on; required in cluster mode. Clients on the API
	// port cannot reach it.
	PeerAddr string
	// Security: TLS for peers, Raft and optionally the client API, and API bearer tokens.
	Security Security
	// Local is the Unix domain socket for co-located clients (the shared-memory path) and
	// its limits; Local.Socket empty means none.
	Local Local
	// Join lists peer addresses (PeerAddr) of existing members. When set and the node has no Raft state
	// yet, it joins through one of them instead of bootstrapping a new cluster.
	Join []string
	// WatchRetain is how many key events (WatchEvents) the node retains for consumers to
	// resume from; a consumer further behind is sent a RESET and a listing. 0 means
	// DefaultWatchRetain.
	WatchRetain int
	// MaxWatchers is the most WatchEvents streams the node serves at once; more are refused
	// with RESOURCE_EXHAUSTED. 0 means DefaultMaxWatchers.
	MaxWatchers int
	// Registry receives the node's Prometheus metrics; nil means they are not registered.
	Registry prometheus.Registerer
	// Logger receives the node's logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the embedded single-node defaults for dir.
func DefaultConfig(dir string) Config {
	return Config{
		ID:                "node1",
		DataDir:           dir,
		BucketSize:        1 << 30,
		Txn:               txn.DefaultConfig("node1"),
		SnapshotThreshold: 8192,
		TrailingLogs:      10240,
		RetainTxnResults:  1 << 16,
	}
}

// raftAdvertise is the Raft address other members dial.
func (c Config) raftAdvertise() string {
	if c.RaftAdvertise != "" {
		return c.RaftAdvertise
	}
	return c.RaftAddr
}

// cluster reports cluster mode: RaftAddr set, the node is a member of a Raft cluster over
// TCP (startMember); otherwise it is an embedded single node (startEmbedded). Every
// difference between the modes is decided by this one test.
func (c Config) cluster() bool { return c.RaftAddr != "" }

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("node: ID is empty"))
	}
	if len(c.ID) > wire.MaxNodeIDBytes {
		errs = append(errs, fmt.Errorf("node: ID of %d bytes is longer than %d", len(c.ID), wire.MaxNodeIDBytes))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("node: DataDir is empty"))
	}
	if c.BucketSize <= 0 {
		errs = append(errs, errors.New("node: BucketSize must be positive"))
	}
	if c.WatchRetain < 0 || c.MaxWatchers < 0 {
		errs = append(errs, errors.New("node: WatchRetain and MaxWatchers must not be negative"))
	}
	if c.Capacity < 0 {
		errs = append(errs, errors.New("node: Capacity must not be negative"))
	}
	if c.Txn.NodeID != "" && c.Txn.NodeID != c.ID {
		errs = append(errs, errors.New("node: Txn.NodeID differs from ID"))
	}
	if !c.cluster() && len(c.Join) > 0 {
		errs = append(errs, errors.New("node: Join needs RaftAddr (cluster mode)"))
	}
	if c.cluster() && c.APIAddr == "" {
		errs = append(errs, errors.New("node: a cluster member (RaftAddr set) needs APIAddr"))
	}
	if c.cluster() && c.PeerAddr == "" {
		errs = append(errs, errors.New("node: a cluster member (RaftAddr set) needs PeerAddr"))
	}
	if !c.cluster() && c.PeerAddr != "" {
		errs = append(errs, errors.New("node: PeerAddr needs RaftAddr (cluster mode)"))
	}
	errs = append(errs, c.Security.validate(c)...)
	errs = append(errs, c.Local.validate()...)
	return errors.Join(errs...)
}
