// Package cluster is a node's life as a member of its cluster: membership (join, standing,
// removal, the leader's announcements; membership.go), identity (the cluster ID and the node
// ID of a data directory; identity.go), peer security (mutual TLS, who may call what, the
// API's tokens; security.go) and the Cluster gRPC service that members and operators call
// (service.go).
//
// Package node wires a Member into a running node: New before anything opens, OpenClusterID
// before Raft, RaftTLS and ClusterID into Raft's transport, Attach once Raft is open,
// RaftOpened in cluster mode, Start once the listeners serve, and CheckReplicatedClusterID
// after recovery. What the member needs of the node is Host. A Member reads Raft and the FSM
// and proposes membership commands; it opens nothing and owns no goroutine but its watches,
// which end with Config.Closing.
package cluster

import (
	"context"
	"crypto/tls"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/forward"
	"github.com/kvoffload/kvoffload/internal/transport"
	"github.com/kvoffload/kvoffload/raftmeta"
)

// Config is what a member takes of its node's configuration.
type Config struct {
	ID            string   // the node's ID
	DataDir       string   // the node's data directory, which holds the ID files
	Join          []string // peer addresses of members to join through (node.Config.Join)
	RaftAdvertise string   // the Raft address other members dial
	// CertFile, KeyFile and CAFile are the node's TLS material (node.Security); none: no TLS.
	CertFile, KeyFile, CAFile string
	MaxMsgBytes               int    // the gRPC message limit of peer calls and the node's servers
	MaxRecordLen              int64  // the longest record a forwarded COMMIT may name
	Build                     string // the node's build, in Status answers
	Logger                    *slog.Logger
	Closing                   <-chan struct{} // closed when the node shuts down
}

// Host is what a member needs of the node it runs in.
type Host interface {
	// APIAddr and PeerAddr are the addresses the node's listeners are bound to ("" before).
	APIAddr() string
	PeerAddr() string
	// Ready holds a call until the node has recovered, and refuses it (a gRPC status) if the
	// node does not serve.
	Ready(ctx context.Context) error
	// ReadLocal serves another member's read of keys this node owns (Cluster/ReadLocal).
	ReadLocal(req *pb.GetRequest, stream grpc.ServerStreamingServer[pb.GetChunk]) error
	// Space returns the bucket store's free bytes and the reserve it keeps.
	Space() (free, reserve int64, err error)
	// Removed is told that this node was removed from the cluster, and why. A node that has
	// finished opening stops serving for good; one still opening ignores it.
	Removed(why error)
}

// Member is a node's membership in its cluster.
type Member struct {
	cfg    Config
	log    *slog.Logger
	host   Host
	tls    *tlsMaterial // nil without TLS
	peers  *forward.Peers
	raft   *raftmeta.Node
	fsm    *fsm.FSM
	leader *forward.Leader // cluster mode only
	// raftAdmit is raft for the Raft listener's admission check, which runs on connections
	// accepted while raftmeta.Open is still returning.
	raftAdmit atomic.Pointer[raftmeta.Node]
	// joinAdmit, set by join from the cluster's Status before this fresh node sends Join, is
	// the members whose Raft connections it admits while its configuration is still empty.
	joinAdmit atomic.Pointer[[]string]
	// clusterID is the cluster ID of the data directory (identity.go); nil until known.
	clusterID atomic.Pointer[string]
	adoptMu   sync.Mutex // serializes adoptClusterID's check and write of CLUSTER_ID
	// joining is the ID of the cluster a fresh node asked to join (pinned before its Join):
	// the only cluster whose Raft traffic it accepts until the Join reply is recorded.
	joining atomic.Pointer[string]
	// legacy: the node has Raft state but no cluster ID anywhere (data from before cluster
	// IDs): it accepts Raft traffic from any cluster until the leader records an ID.
	legacy atomic.Bool
}

// New loads the node's TLS material and returns its membership, which has opened nothing.
func New(cfg Config, host Host) (*Member, error) {
	tm, err := loadTLS(cfg)
	if err != nil {
		return nil, err
	}
	m := &Member{cfg: cfg, log: cfg.Logger, host: host, tls: tm}
	m.peers = forward.NewPeers(m.peerCreds, m.peerDialOptions()...)
	return m, nil
}

// Peers are the node's connections to the other members, with this member's credentials
// and cluster ID; the node closes them.
func (m *Member) Peers() *forward.Peers { return m.peers }

// TLS reports whether the node has TLS material.
func (m *Member) TLS() bool { return m.tls != nil }

// RaftTLS is the Raft transport's TLS (tlsMaterial.raft), nil without TLS.
func (m *Member) RaftTLS() *raftmeta.TLS { return m.tls.raft(m.admitRaftPeer) }

// Legacy is the Raft handshake's answer while this node knows no cluster ID: whether it
// accepts traffic from any cluster (data from before cluster IDs).
func (m *Member) Legacy() bool { return m.legacy.Load() }

// Attach gives the member the node's Raft and FSM, once Raft has opened.
func (m *Member) Attach(r *raftmeta.Node, f *fsm.FSM) {
	m.raft, m.fsm = r, f
	m.raftAdmit.Store(r)
}

// RaftOpened runs in cluster mode right after Attach: it recovers the cluster ID from the Raft
// state if the data directory lost it (recoverClusterID) and keeps leader, through which a
// member that is not the leader reaches it.
func (m *Member) RaftOpened(leader *forward.Leader) error {
	m.leader = leader
	if err := m.recoverClusterID(); err != nil {
		return err
	}
	if m.legacy.Load() {
		go m.watchClusterID()
	}
	leader.OnRemoved(m.noteRemoved)
	return nil
}

// Keepalive on the node's listeners and peer connections: a connection whose peer stops
// answering (SIGSTOP, a hung VM, a dead link without a FIN) is closed within about
// keepaliveTime+keepaliveTimeout, and clients may ping as often as every keepaliveMinPing to
// detect a stalled member themselves (client.Options.StallTimeout).
const (
	keepaliveTime    = 2 * time.Second
	keepaliveTimeout = 2 * time.Second
	keepaliveMinPing = 500 * time.Millisecond
	// handshakeTimeout bounds a new connection's TLS and HTTP/2 handshakes (gRPC's default is
	// 120 s): a connection that never starts one holds a descriptor only this long.
	handshakeTimeout = 5 * time.Second
	// MaxPeerConns caps the peer port's open connections (netutil.LimitListener): members
	// need a few each, and connections that never finish their handshake cannot take every
	// descriptor of the process from the API port and the bucket files.
	MaxPeerConns = 256
)

// ServerOptions are the options of each of a node's gRPC servers: the transport's tuning,
// the message limit, keepalive and the handshake timeout.
func ServerOptions(limit int) []grpc.ServerOption {
	return append(transport.ServerOptions(),
		grpc.MaxRecvMsgSize(limit), grpc.MaxSendMsgSize(limit),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinPing, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(handshakeTimeout),
	)
}

// PeerServerOptions are the peer server's options: ServerOptions, the cluster-ID check of
// every call (clusterIDCheck) and, with TLS, mutual TLS (tlsMaterial.peerServer).
func (m *Member) PeerServerOptions() []grpc.ServerOption {
	unary, stream := clusterIDCheck(m.ClusterID, m.log)
	opts := append(ServerOptions(m.cfg.MaxMsgBytes), grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	if m.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(m.tls.peerServer())))
	}
	return opts
}

// APITLS is the client API's TLS: the node's certificate, no client certificate asked.
func (m *Member) APITLS() *tls.Config { return m.tls.apiServer() }

// Register registers the Cluster service on the peer server s.
func (m *Member) Register(s *grpc.Server) { pb.RegisterClusterServer(s, m.Service()) }

// Service is the Cluster service; the client API answers Status with it too.
func (m *Member) Service() pb.ClusterServer { return clusterService{m: m} }

// peerCreds are the transport credentials of a connection to member ("": whoever answers)
// at addr (forward.Peers): mutual TLS when configured (tlsMaterial.peerClient), plaintext
// otherwise.
func (m *Member) peerCreds(member, addr string) grpc.DialOption {
	if m.tls == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(m.tls.peerClient(member, addr)))
}

// peerDialOptions are the other options of every call to another member (forward.Peers):
// the same keepalive and message limit as the listeners, and this node's cluster ID stamped
// on every call (clusterIDInterceptors).
func (m *Member) peerDialOptions() []grpc.DialOption {
	unary, stream := clusterIDInterceptors(m.ClusterID)
	limit := m.cfg.MaxMsgBytes
	return append(transport.DialOptions(),
		grpc.WithUnaryInterceptor(unary), grpc.WithStreamInterceptor(stream),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit), grpc.MaxCallSendMsgSize(limit)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: peerBackoff, MinConnectTimeout: peerConnectTimeout}),
	)
}

// peerBackoff paces the reconnection to a member that cannot be reached: gRPC's default
// (backoff.DefaultConfig) doubles up to two minutes, so a member back from a long outage
// would stay unreachable from the others for as long, its keys Unavailable through them
// (TestOwnerServesSoonAfterAnOutage). Members are few, and an attempt at a dead address
// costs one refused connection, so it is capped at a second.
var peerBackoff = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}

// peerConnectTimeout bounds one connection attempt to a member (gRPC's default is 20 s).
const peerConnectTimeout = 5 * time.Second

// Announce records this node's addresses in the member directory when it becomes leader
// (the bootstrap node has no one else to do it; a restarted leader may have moved), and the
// cluster ID in the metadata if it has none (raftmeta.Node.OnLeader).
func (m *Member) Announce() {
	me := fsm.Member{NodeID: m.cfg.ID, RaftAddr: m.cfg.RaftAdvertise, APIAddr: m.host.APIAddr(), PeerAddr: m.host.PeerAddr()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cur, ok := m.fsm.Member(m.cfg.ID); !ok || cur != me {
		cmd := fsm.EncodeSetMember(fsm.SetMember{TxnID: kvoffload.NewTxnID(), Member: me})
		if _, err := m.raft.Propose(ctx, cmd); err != nil {
			m.log.Warn("could not record this node in the member directory", "err", err)
		}
	}
	m.recordClusterID(ctx)
}
