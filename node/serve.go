package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/cluster"
	"github.com/kvoffload/kvoffload/txn"
)

// serve starts the client API (KVOffload, gRPC health, server reflection) on cfg.APIAddr
// and, in cluster mode, the peer service (Cluster) on cfg.PeerAddr: two listeners, so that
// a client of the API cannot reach a single peer RPC (docs/security.md).
func (n *Node) serve() error {
	n.health = health.NewServer()
	n.setServing(healthpb.HealthCheckResponse_NOT_SERVING) // until recovery ends
	if n.cfg.Local.Socket != "" {
		if err := n.serveLocal(); err != nil {
			return err
		}
	}
	if n.cfg.APIAddr == "" {
		return nil // an embedded node with only the local socket
	}
	lis, err := net.Listen("tcp", n.cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("node: API listener: %w", err)
	}
	n.listener = lis
	if !loopback(n.cfg.APIAddr) && !n.cfg.Security.APITLS && len(n.cfg.Security.APITokens) == 0 {
		n.log.Warn("the client API is open: not on loopback, no TLS, no token; anyone who can reach it can read, offload and remove keys (docs/security.md)", "addr", lis.Addr().String())
	}
	opts := cluster.ServerOptions(maxMsgBytes(n.cfg.Txn))
	if n.cfg.Security.APITLS {
		opts = append(opts, grpc.Creds(credentials.NewTLS(n.member.APITLS())))
	}
	if tokens := n.cfg.Security.APITokens; len(tokens) > 0 {
		opts = append(opts, cluster.TokenCheck(tokens)...)
	}
	n.server = grpc.NewServer(opts...)
	pb.RegisterKVOffloadServer(n.server, kvService{n: n})
	registerHealth(n.server, n.health)
	reflection.Register(n.server)
	go runServer(n.log, n.server, lis, "API")
	if n.cfg.PeerAddr == "" {
		return nil
	}
	plis, err := net.Listen("tcp", n.cfg.PeerAddr)
	if err != nil {
		return fmt.Errorf("node: peer listener: %w", err)
	}
	n.peerListener = plis
	n.peerServer = grpc.NewServer(n.member.PeerServerOptions()...)
	n.member.Register(n.peerServer)
	reflection.Register(n.peerServer) // for operators' grpcurl (Leave); behind mTLS when TLS is on
	go runServer(n.log, n.peerServer, netutil.LimitListener(plis, cluster.MaxPeerConns), "peer")
	return nil
}

func registerHealth(s *grpc.Server, h *health.Server) { healthpb.RegisterHealthServer(s, h) }

func runServer(lg *slog.Logger, s *grpc.Server, lis net.Listener, name string) {
	if err := s.Serve(lis); err != nil {
		lg.Error(name+" server stopped", "err", err)
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

// waitReady holds a request until recovery has finished, then admits it while the node
// serves: a fail-stopped or removed node refuses it at once (wire.Refusal), so that no
// caller waits out its deadline for an answer the node already knows.
func (n *Node) waitReady(ctx context.Context) error {
	select {
	case <-n.ready:
		if err := n.coord.Usable(); err != nil && !errors.Is(err, txn.ErrClosed) {
			return grpcError(fmt.Errorf("node %s: %w", n.cfg.ID, err))
		}
		return nil
	case <-n.closing:
		return status.Error(codes.Unavailable, "node is shutting down")
	case <-ctx.Done():
		return status.Error(codes.Unavailable, "node is still recovering: "+ctx.Err().Error())
	}
}

// Healthy reports nil unless the node has fail-stopped: after an fsync error of the WAL or
// a bucket (never retried, docs/design.md), or an error writing the Raft log (raft.db: then
// Raft is stopped, and the error says whether the filesystem is full), it accepts nothing
// more and only a restart recovers it, so a liveness probe (/healthz) must see it.
func (n *Node) Healthy() error {
	if r := n.raftOpened.Load(); r != nil && r.LogFault() != nil {
		return fmt.Errorf("node %s: fail-stopped, restart the process to recover: %w", n.cfg.ID, r.LogFault())
	}
	if n.coord == nil {
		return nil // still opening: readiness says so
	}
	if err := n.coord.Usable(); errors.Is(err, txn.ErrRemoved) {
		return fmt.Errorf("node %s was removed from the cluster: stop it (a restart with its data directory refuses to start): %w", n.cfg.ID, err)
	} else if err != nil {
		return fmt.Errorf("node %s: fail-stopped, restart the process to recover: %w", n.cfg.ID, err)
	}
	return nil
}

// Ready reports nil once recovery has finished, while the node is Healthy and, in a cluster,
// while it knows a leader (a node cut off from the cluster, or removed from it, is not ready:
// its metadata may be stale).
func (n *Node) Ready() error {
	select {
	case <-n.ready:
	default:
		return fmt.Errorf("node %s: recovering", n.cfg.ID)
	}
	if err := n.Healthy(); err != nil {
		return err
	}
	if n.cfg.cluster() {
		if id, _ := n.raft.Leader(); id == "" {
			return fmt.Errorf("node %s: no leader known (cut off from the cluster, or removed from it)", n.cfg.ID)
		}
	}
	return nil
}

// Shutdown stops the node gracefully: no new requests are accepted, requests in flight
// finish (or ctx ends), leadership moves to another voter, then the node closes.
func (n *Node) Shutdown(ctx context.Context) error {
	if n.health != nil {
		n.health.Shutdown() // health checks say NOT_SERVING while requests drain
	}
	for _, srv := range []*grpc.Server{n.server, n.localServer} {
		if srv == nil {
			continue
		}
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			srv.Stop()
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
		_, err := n.raft.Propose(ctx, fsm.EncodePrune(fsm.Prune{TxnID: kvoffload.NewTxnID(), Before: before}))
		cancel()
		if err != nil {
			n.log.Debug("pruning transaction results failed", "err", err)
			continue
		}
		last = before
	}
}
