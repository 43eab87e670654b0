package node

import (
	"context"

	"google.golang.org/grpc"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/internal/forward"
	"github.com/kvoffload/kvoffload/internal/wire"
)

// startMember starts a cluster member. The cluster ID comes first (every Raft connection
// and peer call carries it), then Raft, the coordinator and both listeners; then the
// membership decisions and checks (cluster.Member.Start), recovery, and the check of the
// replicated cluster ID.
func (n *Node) startMember(ctx context.Context, fresh bool) (err error) {
	if err := n.member.OpenClusterID(fresh); err != nil {
		return err
	}
	rcfg := n.raftConfig()
	rcfg.Bootstrap = len(n.cfg.Join) == 0
	rcfg.TLS, rcfg.ClusterID, rcfg.ClusterOpen = n.member.RaftTLS(), n.member.ClusterID, n.member.Legacy
	if err := n.openRaft(rcfg); err != nil {
		return err
	}
	n.leader = forward.NewLeader(n.raft, n.fsm, n.peers, n.cfg.ID)
	if err := n.member.RaftOpened(n.leader); err != nil {
		return err
	}
	if err := n.openCoordinator(forward.Meta(n.raft, n.fsm, n.leader)); err != nil {
		return err
	}
	n.coord.SetRemote(forward.NewOwners(n.fsm, n.peers))
	n.raft.OnLeader(n.member.Announce)
	if err := n.serve(); err != nil {
		return err
	}
	if err := n.member.Start(ctx, fresh); err != nil {
		return err
	}
	if n.recovery, err = n.coord.Recover(ctx); err != nil {
		return err
	}
	return n.member.CheckReplicatedClusterID()
}

// ClusterID returns the ID of the cluster this node belongs to: the one in its data
// directory, else the one it is joining, else the replicated one, else "" (a fresh node
// that has not asked to join yet, data from before cluster IDs, or an embedded node).
func (n *Node) ClusterID() string { return n.member.ClusterID() }

// memberHost is what the membership needs of the node (cluster.Host).
type memberHost struct{ n *Node }

func (h memberHost) APIAddr() string                 { return h.n.APIAddr() }
func (h memberHost) PeerAddr() string                { return h.n.PeerAddr() }
func (h memberHost) Ready(ctx context.Context) error { return h.n.waitReady(ctx) }

func (h memberHost) Space() (free, reserve int64, err error) {
	bs, err := h.n.buckets.Stats()
	return bs.FreeBytes, bs.Reserve, err
}

// Removed: a node that has finished opening was a member, so it was removed while it ran:
// its coordinator refuses every call from now on (txn.ErrRemoved), and its health and
// readiness say so. A node still opening (joining, not yet in the configuration) ignores it.
func (h memberHost) Removed(why error) {
	select {
	case <-h.n.ready:
		h.n.coord.MarkRemoved(why) // and the gRPC health turns NOT_SERVING (notServing)
	default:
	}
}

// ReadLocal serves another member's read of keys this node owns. The values are held until
// the reply is sent: they take their bytes from a budget as BatchGet's do (a member asking
// for one 64 MiB key 48 times held 3 GiB), the one of forwarded reads (metrics.peerBuffers:
// not the API's, or two members reading each other's keys could deadlock until the owner
// deadline).
func (h memberHost) ReadLocal(req *pb.GetRequest, stream grpc.ServerStreamingServer[pb.GetChunk]) error {
	buf := h.n.metrics.peerBuffers.NewHold()
	defer buf.Release()
	res, err := h.n.coord.BatchGetLocal(stream.Context(), req.Keys, buf.Reserver(stream.Context()))
	if err != nil {
		return grpcError(err)
	}
	return wire.SendGets(stream.Send, res)
}
