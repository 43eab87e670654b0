package raftmeta

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/kvoffload/kvoffload/third_party/raft"
)

// Config configures one raft member. A zero tunable (counts, durations) means
// its default, as DefaultConfig sets it.
type Config struct {
	// NodeID is this member's raft server ID; required, stable across restarts.
	NodeID string
	// Dir holds raft.db (raft-boltdb/v2: log store and stable store in one
	// bolt file, fsynced per write) and snapshots/ (FileSnapshotStore,
	// retaining SnapshotRetain snapshots). Created if missing. Unused, and may
	// be "", with Stores.
	Dir string
	// Stores, when set, are Raft's log, stable and snapshot stores and its
	// transport, supplied by the caller (a simulator's); Dir, BindAddr and the
	// TCP options are then unused and BindAddr must be "". nil: raft.db and
	// the file snapshot store on Dir, and the transport BindAddr says.
	Stores *Stores
	// BindAddr is the TCP host:port the raft transport listens on; it may be
	// a wildcard (0.0.0.0:7000, [::]:7000) when AdvertiseAddr is set. "" means
	// an in-memory transport: an embedded single node, or tests that connect
	// in-memory transports themselves.
	BindAddr string
	// AdvertiseAddr is the host:port other members dial to reach this one
	// (and the address in the bootstrap configuration). The host must be an
	// IP address or resolve to one at Open; the IP is what gets advertised.
	// Default: BindAddr (then BindAddr must not be a wildcard; port 0 is
	// fine, the bound port is advertised). Only with a BindAddr.
	AdvertiseAddr string
	// TLS, when set, makes the TCP transport mutual TLS (tlsStreamLayer): Raft traffic is
	// accepted only from, and sent only to, holders of a certificate of the cluster CA. Only
	// with a BindAddr. nil: plain TCP.
	TLS *TLS
	// ClusterID, when set, is called for this node's cluster ID ("" while it knows none) and
	// makes every TCP Raft connection start with the cluster-ID handshake (handshake.go):
	// connections between nodes of different clusters are refused. Only with a BindAddr.
	ClusterID func() string
	// ClusterOpen says, while ClusterID is "", whether to accept Raft connections from any
	// cluster (data from before cluster IDs) or none (a fresh node not joining yet). nil: any.
	ClusterOpen func() bool
	// Bootstrap bootstraps a one-voter cluster (this node, at its advertised
	// address) if Dir holds no raft state yet; ignored when state exists.
	// Exactly one member of a new cluster bootstraps; the others are added
	// by the leader (Node.AddMember).
	Bootstrap bool

	// SnapshotThreshold: raft snapshots once this many entries follow the
	// last snapshot (checked every SnapshotInterval). Default 8192.
	SnapshotThreshold uint64
	// SnapshotInterval: how often raft checks SnapshotThreshold (randomized
	// up to 2x by raft). Default 30s.
	SnapshotInterval time.Duration
	// TrailingLogs: entries kept in the log after a snapshot, so slow
	// followers catch up without a snapshot install. Default 10240.
	TrailingLogs uint64
	// SnapshotRetain: snapshots kept on disk. Default 2.
	SnapshotRetain int

	// HeartbeatTimeout: a follower without leader contact this long starts an
	// election. Default 500ms.
	HeartbeatTimeout time.Duration
	// ElectionTimeout: candidate election timeout; >= HeartbeatTimeout.
	// Default 500ms.
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout: a leader without quorum contact this long steps
	// down; <= HeartbeatTimeout. Default 250ms.
	LeaderLeaseTimeout time.Duration
	// CommitTimeout: how often the leader sends an idle follower an
	// AppendEntries, which carries the commit index. A commit is sent to the
	// followers as soon as the leader makes it (third_party/raft/KVOFFLOAD.md),
	// so this is only the fallback for a request that was lost. Default 50ms.
	CommitTimeout time.Duration
	// ApplyTimeout bounds Propose and Barrier when the context has no
	// earlier deadline. Default 10s.
	ApplyTimeout time.Duration

	// OnLogFault, when set, is called once, on a goroutine of its own, with the first error
	// writing raft.db (it wraps ErrLogWrite; Node.LogFault returns it too). Raft is shut
	// down then: a member that cannot write its log or its vote would otherwise step down
	// and stand for election without end.
	OnLogFault func(error)

	// Logger receives raft's own logs (through an hclog adapter) and ours;
	// nil discards them.
	Logger *slog.Logger
}

// Defaults. Timeouts are a little below raft's own (1s heartbeat) so a single
// node elects itself within about a second, yet leave room for GC and a
// loaded 2-core machine before followers start elections.
const (
	DefaultSnapshotThreshold  = 8192
	DefaultSnapshotInterval   = 30 * time.Second
	DefaultTrailingLogs       = 10240
	DefaultSnapshotRetain     = 2
	DefaultHeartbeatTimeout   = 500 * time.Millisecond
	DefaultElectionTimeout    = 500 * time.Millisecond
	DefaultLeaderLeaseTimeout = 250 * time.Millisecond
	DefaultCommitTimeout      = 50 * time.Millisecond
	DefaultApplyTimeout       = 10 * time.Second
)

// DefaultConfig returns a fresh Config for nodeID storing its state in dir,
// with every tunable set to its default and Bootstrap off.
func DefaultConfig(nodeID, dir string) Config {
	return Config{NodeID: nodeID, Dir: dir}.withDefaults()
}

// withDefaults returns c with each zero tunable replaced by its default.
func (c Config) withDefaults() Config {
	setDefault(&c.SnapshotThreshold, DefaultSnapshotThreshold)
	setDefault(&c.SnapshotInterval, DefaultSnapshotInterval)
	setDefault(&c.TrailingLogs, DefaultTrailingLogs)
	setDefault(&c.SnapshotRetain, DefaultSnapshotRetain)
	setDefault(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	setDefault(&c.ElectionTimeout, DefaultElectionTimeout)
	setDefault(&c.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	setDefault(&c.CommitTimeout, DefaultCommitTimeout)
	setDefault(&c.ApplyTimeout, DefaultApplyTimeout)
	return c
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// Validate reports every problem with c (after zero tunables take their
// defaults), each wrapped in ErrInvalidConfig, including raft's own checks.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.NodeID == "" {
		bad("NodeID is empty")
	}
	switch {
	case c.Stores != nil:
		c.Stores.check(bad)
		if c.BindAddr != "" {
			bad("%v", errStoresWithAddr)
		}
	case c.Dir == "":
		bad("Dir is empty")
	}
	c.validateAddrs(bad)
	if c.SnapshotRetain < 1 {
		bad("SnapshotRetain %d < 1", c.SnapshotRetain)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"SnapshotInterval", c.SnapshotInterval}, {"HeartbeatTimeout", c.HeartbeatTimeout},
		{"ElectionTimeout", c.ElectionTimeout}, {"LeaderLeaseTimeout", c.LeaderLeaseTimeout},
		{"CommitTimeout", c.CommitTimeout}, {"ApplyTimeout", c.ApplyTimeout},
	} {
		if d.d < 0 {
			bad("%s %s is negative", d.name, d.d)
		}
	}
	if c.NodeID != "" {
		if err := raft.ValidateConfig(c.raftConfig(nil)); err != nil {
			bad("raft: %w", err)
		}
	}
	return errors.Join(errs...)
}

// validateAddrs checks BindAddr and AdvertiseAddr without resolving names.
func (c Config) validateAddrs(bad func(format string, args ...any)) {
	if c.BindAddr == "" {
		if c.TLS != nil {
			bad("TLS needs a BindAddr (the in-memory transport has no network)")
		}
		if c.AdvertiseAddr != "" {
			bad("AdvertiseAddr %q needs a BindAddr (the in-memory transport is not dialable)", c.AdvertiseAddr)
		}
		return
	}
	if c.TLS != nil && (c.TLS.Server == nil || c.TLS.Client == nil) {
		bad("TLS needs both a Server and a Client tls.Config")
	}
	host, _, err := net.SplitHostPort(c.BindAddr)
	if err != nil {
		bad("BindAddr %q: %v", c.BindAddr, err)
		return
	}
	if c.AdvertiseAddr == "" {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			bad("BindAddr %q is a wildcard address other members cannot dial: set AdvertiseAddr", c.BindAddr)
		}
		return
	}
	host, port, err := net.SplitHostPort(c.AdvertiseAddr)
	switch {
	case err != nil:
		bad("AdvertiseAddr %q: %v", c.AdvertiseAddr, err)
	case host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified():
		bad("AdvertiseAddr %q is not dialable", c.AdvertiseAddr)
	case port == "" || port == "0":
		bad("AdvertiseAddr %q needs a port", c.AdvertiseAddr)
	}
}

// raftConfig maps c (defaults applied) onto raft's Config. Every option we
// rely on is set here explicitly.
func (c Config) raftConfig(logger *slog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.NodeID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = c.SnapshotInterval
	rc.TrailingLogs = c.TrailingLogs
	// The FSM is in memory: it must be restored from the snapshot on start.
	rc.NoSnapshotRestoreOnStart = false
	rc.Logger = newHCLogger(logger, "raft")
	return rc
}
