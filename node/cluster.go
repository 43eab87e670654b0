package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn"
)

// Keepalive on both listeners: a connection whose peer stops answering (SIGSTOP, a hung VM,
// a dead link without a FIN) is closed within about keepaliveTime+keepaliveTimeout, and
// clients may ping as often as every keepaliveMinPing to detect a stalled member themselves
// (client.Options.StallTimeout).
const (
	keepaliveTime    = 2 * time.Second
	keepaliveTimeout = 2 * time.Second
	keepaliveMinPing = 500 * time.Millisecond
)

func serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsgBytes), grpc.MaxSendMsgSize(maxMsgBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinPing, PermitWithoutStream: true}),
	}
}

// serve starts the client API (KVOffload, gRPC health, server reflection) on cfg.APIAddr
// and, in cluster mode, the peer service (Cluster) on cfg.PeerAddr: two listeners, so that
// a client of the API cannot reach a single peer RPC (docs/security.md).
func (n *Node) serve() error {
	lis, err := net.Listen("tcp", n.cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("node: API listener: %w", err)
	}
	n.listener = lis
	opts := serverOptions()
	if n.cfg.Security.APITLS {
		opts = append(opts, grpc.Creds(credentials.NewTLS(n.tls.apiServer())))
	}
	if tokens := n.cfg.Security.APITokens; len(tokens) > 0 {
		unary, stream := tokenCheck(tokens)
		opts = append(opts, grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	}
	n.server = grpc.NewServer(opts...)
	pb.RegisterKVOffloadServer(n.server, kvService{n: n})
	n.health = health.NewServer()
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING) // until recovery ends
	healthpb.RegisterHealthServer(n.server, n.health)
	reflection.Register(n.server)
	go n.runServer(n.server, lis, "API")
	if n.cfg.PeerAddr == "" {
		return nil
	}
	plis, err := net.Listen("tcp", n.cfg.PeerAddr)
	if err != nil {
		return fmt.Errorf("node: peer listener: %w", err)
	}
	n.peerListener = plis
	unary, stream := clusterIDCheck(n.ClusterID)
	popts := append(serverOptions(), grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	if n.tls != nil {
		popts = append(popts, grpc.Creds(credentials.NewTLS(n.tls.peerServer())))
	}
	n.peerServer = grpc.NewServer(popts...)
	pb.RegisterClusterServer(n.peerServer, clusterService{n: n})
	reflection.Register(n.peerServer) // for operators' grpcurl (Leave); behind mTLS when TLS is on
	go n.runServer(n.peerServer, plis, "peer")
	return nil
}

func (n *Node) runServer(s *grpc.Server, lis net.Listener, name string) {
	if err := s.Serve(lis); err != nil {
		n.log.Error(name+" server stopped", "err", err)
	}
}

// APIAddr is the address the gRPC API listens on ("" without one).
func (n *Node) APIAddr() string {
	if n.listener == nil {
		return ""
	}
	return n.listener.Addr().String()
}

// PeerAddr is the address the peer service listens on ("" without one).
func (n *Node) PeerAddr() string {
	if n.peerListener == nil {
		return ""
	}
	return n.peerListener.Addr().String()
}

// waitReady holds a request until recovery has finished.
func (n *Node) waitReady(ctx context.Context) error {
	select {
	case <-n.ready:
		return nil
	case <-n.closing:
		return status.Error(codes.Unavailable, "node is shutting down")
	case <-ctx.Done():
		return status.Error(codes.Unavailable, "node is still recovering: "+ctx.Err().Error())
	}
}

// Ready reports nil once recovery has finished and, in a cluster, while this node knows a
// leader (a node cut off from the cluster, or removed from it, is not ready: its metadata
// may be stale).
func (n *Node) Ready() error {
	select {
	case <-n.ready:
	default:
		return fmt.Errorf("node %s: recovering", n.cfg.ID)
	}
	if n.cfg.RaftAddr != "" {
		if id, _ := n.raft.Leader(); id == "" {
			return fmt.Errorf("node %s: no leader known (cut off from the cluster, or removed from it)", n.cfg.ID)
		}
	}
	return nil
}

// join asks the members in cfg.Join, in turn, to add this node, until one accepts.
func (n *Node) join(ctx context.Context) error {
	req := &pb.JoinRequest{NodeId: n.cfg.ID, RaftAddr: n.cfg.raftAdvertise(), ApiAddr: n.APIAddr(), PeerAddr: n.PeerAddr(), ClusterId: n.ClusterID()}
	var last error
	for attempt := 0; ; attempt++ {
		addrs := slices.Clone(n.cfg.Join)
		for i := 0; i < len(addrs); i++ {
			addr := addrs[i]
			conn, err := n.peers.conn(addr)
			if err != nil {
				last = err
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var trailer metadata.MD
			resp, err := pb.NewClusterClient(conn).Join(cctx, req, grpc.Trailer(&trailer))
			cancel()
			if to := trailer.Get(leaderTrailer); len(to) == 1 && !slices.Contains(addrs, to[0]) {
				addrs = append(addrs, to[0]) // redirected to the leader (TLS: joins are not forwarded)
			}
			if err == nil {
				n.log.Info("joined the cluster", "via", addr, "voter", resp.Voter, "cluster", resp.ClusterId)
				return n.adoptClusterID(resp.ClusterId)
			}
			last = fmt.Errorf("join via %s: %w", addr, err)
			n.log.Warn("join attempt failed; retrying", "via", addr, "err", err)
			if c := status.Code(err); c == codes.AlreadyExists || c == codes.FailedPrecondition && strings.Contains(err.Error(), "cluster ID mismatch") {
				return fmt.Errorf("node: %w", last)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node: joining: %w (last error: %w)", ctx.Err(), last)
		case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)):
		}
	}
}

// inConfiguration reports whether this node appears in its Raft configuration.
func (n *Node) inConfiguration() bool {
	servers, err := n.raft.Servers()
	if err != nil {
		return false
	}
	for _, sv := range servers {
		if sv.ID == n.cfg.ID {
			return true
		}
	}
	return false
}

// removedGrace is how long a node in a cluster waits for a Raft leader before it checks
// whether it was removed from the cluster. A leader contacts the members of its
// configuration every heartbeat, and an election takes about a second.
const removedGrace = 5 * time.Second

// waitLeader waits until this node knows a Raft leader. In a cluster it also refuses to start
// a node that was removed from it (ErrRemoved), by this rule: a node that was a member
// (its Raft state holds an entry: leaders replicate only to their members) has been removed
// when, after removedGrace without a leader's contact, the cluster's configuration does not
// list it. The cluster's configuration is asked of the members in cfg.Join and in the member
// directory (clusterLists); when none of them knows a leader, the local configuration stands
// in for it: unlisted reports that it does not list this node (Open). So a removed node that
// received its removal is refused after removedGrace even with the other members down, one
// removed while it was down is refused once a member answers, and a node whose first join
// was cut short while it caught up (listed by the leader, not yet by its own log) is
// contacted by the leader and starts.
func (n *Node) waitLeader(ctx context.Context, unlisted bool) error {
	for {
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if n.cfg.RaftAddr != "" {
			wctx, cancel = context.WithTimeout(ctx, removedGrace)
		}
		err := n.raft.WaitLeader(wctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("node: waiting for a Raft leader: %w", err)
		}
		listed, known := n.clusterLists(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("node: waiting for a Raft leader: %w", ctx.Err())
		}
		switch {
		case known && !listed:
			return n.removedError("the cluster's Raft configuration does not list it")
		case !known && unlisted:
			return n.removedError("its Raft state is from an earlier membership, its Raft configuration no longer lists it, and no leader contacts it")
		}
		n.log.Warn("no Raft leader known yet; still waiting", "waited", removedGrace)
	}
}

func (n *Node) removedError(why string) error { return removedError{id: n.cfg.ID, why: why} }

// removedError is ErrRemoved for one node, with the reason.
type removedError struct{ id, why string }

func (e removedError) Error() string {
	return fmt.Sprintf("node: node %s was removed from the cluster; start a fresh node with a new --id and an empty --data (%s; a data directory that belonged to a member never joins again: see docs/operations.md)", e.id, e.why)
}

func (e removedError) Is(target error) bool { return target == ErrRemoved }

// clusterLists asks the members in cfg.Join and in the member directory (at their peer
// addresses) for the cluster's
// Raft configuration (Cluster/Status), following each answer to the leader it names: only
// the leader's own answer counts (a lagging follower's configuration may predate this
// node's join). known reports that the leader answered; listed, that it lists this node.
func (n *Node) clusterLists(ctx context.Context) (listed, known bool) {
	addrs := slices.Clone(n.cfg.Join)
	for _, m := range n.fsm.Members() {
		if a := m.PeerTarget(); m.NodeID != n.cfg.ID && a != "" && !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	for i := 0; i < len(addrs) && ctx.Err() == nil; i++ {
		addr := addrs[i]
		if addr == n.PeerAddr() {
			continue
		}
		st, err := n.peerStatus(ctx, addr)
		if err != nil || st.LeaderId == "" {
			continue
		}
		leader := slices.IndexFunc(st.Members, func(m *pb.Member) bool { return m.NodeId == st.LeaderId })
		if leader < 0 || st.Members[leader].PeerAddr != addr {
			if leader >= 0 && st.Members[leader].PeerAddr != "" && !slices.Contains(addrs, st.Members[leader].PeerAddr) {
				addrs = append(addrs, st.Members[leader].PeerAddr) // ask the leader itself
			}
			continue
		}
		listed = slices.ContainsFunc(st.Members, func(m *pb.Member) bool { return m.NodeId == n.cfg.ID })
		return listed, true
	}
	return false, false
}

// peerStatus asks the member at peer address addr for Cluster/Status, within 2 s.
func (n *Node) peerStatus(ctx context.Context, addr string) (*pb.StatusResponse, error) {
	conn, err := n.peers.conn(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return pb.NewClusterClient(conn).Status(ctx, &pb.StatusRequest{})
}

// checkNoPriorKeys refuses to start a node that joined with an empty data directory while
// the metadata says its ID owns keys: its recovery would find their buckets missing and
// drop them cluster-wide (G2). Such a node must get a new ID.
func (n *Node) checkNoPriorKeys(ctx context.Context) error {
	if err := n.cmeta().Barrier(ctx); err != nil {
		return fmt.Errorf("node: catching up after join: %w", err)
	}
	if own := n.fsm.Owners()[n.cfg.ID]; own.Keys > 0 {
		return fmt.Errorf("node: this data directory is new but node ID %s owns %d keys in the cluster: refusing to start (use a new --id; see docs/operations.md)", n.cfg.ID, own.Keys)
	}
	return nil
}

// announce records this node's addresses in the member directory when it becomes leader
// (the bootstrap node has no one else to do it; a restarted leader may have moved), and the
// cluster ID in the metadata if it has none.
func (n *Node) announce() {
	me := fsm.Member{NodeID: n.cfg.ID, RaftAddr: n.cfg.raftAdvertise(), APIAddr: n.APIAddr(), PeerAddr: n.PeerAddr()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cur, ok := n.fsm.Member(n.cfg.ID); !ok || cur != me {
		cmd := fsm.EncodeSetMember(fsm.SetMember{TxnID: txn.NewTxnID(), Member: me})
		if _, err := n.raft.Propose(ctx, cmd); err != nil {
			n.log.Warn("could not record this node in the member directory", "err", err)
		}
	}
	n.recordClusterID(ctx)
}

// Shutdown stops the node gracefully: no new requests are accepted, requests in flight
// finish (or ctx ends), leadership moves to another voter, then the node closes.
func (n *Node) Shutdown(ctx context.Context) error {
	if n.health != nil {
		n.health.Shutdown() // health checks say NOT_SERVING while requests drain
	}
	if n.server != nil {
		done := make(chan struct{})
		go func() { n.server.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			n.server.Stop()
		}
	}
	if n.raft != nil && n.raft.IsLeader() {
		if err := n.raft.TransferLeadership(ctx); err != nil {
			n.log.Warn("leadership transfer failed", "err", err)
		}
	}
	return n.Close()
}

// pruneEvery is how often the leader checks whether transaction results can be pruned.
const pruneEvery = 2 * time.Second

// pruneLoop runs for the node's life: while this node leads, it proposes a Prune of the
// transaction results older than RetainTxnResults log entries, so the metadata's
// de-duplication table (and every snapshot) stays bounded.
func (n *Node) pruneLoop() {
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	var last uint64
	for {
		select {
		case <-n.closing:
			return
		case <-t.C:
		}
		keep := n.cfg.RetainTxnResults
		applied := n.fsm.AppliedIndex()
		if keep == 0 || !n.raft.IsLeader() || applied <= keep || applied-keep <= last {
			continue
		}
		before := applied - keep
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := n.raft.Propose(ctx, fsm.EncodePrune(fsm.Prune{TxnID: txn.NewTxnID(), Before: before}))
		cancel()
		if err != nil {
			n.log.Debug("pruning transaction results failed", "err", err)
			continue
		}
		last = before
	}
}
