package cluster

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/devca"
	"github.com/kvoffload/kvoffload/internal/forward"
	"github.com/kvoffload/kvoffload/raftmeta"
)

// clusterService implements the node-to-node Cluster gRPC service.
type clusterService struct {
	pb.UnimplementedClusterServer
	m *Member
}

// Join adds a node; a member that is not the leader forwards the request to the leader, or,
// with TLS, redirects the caller there (redirect). With TLS, a node joins only as itself: the
// node ID must be its certificate's.
func (s clusterService) Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	if req.NodeId == "" || req.RaftAddr == "" || req.ApiAddr == "" || req.PeerAddr == "" {
		return nil, status.Error(codes.InvalidArgument, "join needs node_id, raft_addr, api_addr and peer_addr")
	}
	if mine := s.m.ClusterID(); req.ClusterId != "" && mine != "" && req.ClusterId != mine {
		s.m.log.Warn("join refused: another cluster's node", "id", req.NodeId, "its_cluster", req.ClusterId, "cluster", mine)
		return nil, status.Errorf(codes.FailedPrecondition, "cluster ID mismatch: node %s belongs to cluster %s, this is cluster %s: a node with state never joins another cluster (start it with an empty data directory to join this one)", req.NodeId, req.ClusterId, mine)
	}
	caller := callerOf(ctx)
	if s.m.tls != nil && (caller.name != req.NodeId || caller.operator) {
		s.m.log.Warn("join refused: the certificate is not the joining node's", "id", req.NodeId, "by", caller)
		return nil, status.Errorf(codes.PermissionDenied, "join of node %q by %s: a node joins only with its own certificate", req.NodeId, caller)
	}
	if resp, relayed, err := toLeader(ctx, s, func(cl pb.ClusterClient) (*pb.JoinResponse, error) {
		return cl.Join(ctx, req)
	}); relayed {
		return resp, err
	}
	// An ID that is already a member is refused: a node only joins when it has no Raft state,
	// so a known ID asking again is a node whose disk was lost or wiped (or an impostor), and
	// admitting it would let its empty recovery drop the keys the real node owns. The
	// procedure is Leave, then join under a new ID (docs/operations.md).
	if m, ok := s.m.fsm.Member(req.NodeId); ok {
		return nil, status.Errorf(codes.AlreadyExists,
			"node ID %s is already a member (raft %s, api %s): a node joins only with an empty data directory; remove the old member with Leave and join under a new ID",
			req.NodeId, m.RaftAddr, m.APIAddr)
	}
	// A removed ID is refused too: its certificate stays valid until the CA is rotated, and
	// Leave must keep its holder out (a removed node rejoining with its old certificate and an
	// empty data directory could read and remove any key; TestRemovedIDNeverJoinsAgain).
	if s.m.fsm.WasRemoved(req.NodeId) {
		s.m.log.Warn("join refused: the ID was removed from the cluster", "id", req.NodeId, "by", callerOf(ctx))
		return nil, status.Errorf(codes.AlreadyExists,
			"node ID %s was removed from this cluster (Leave), and a removed ID never joins again: start the node with a new --id (and, with TLS, a certificate for it)", req.NodeId)
	}
	voter, err := s.m.raft.AddMember(ctx, req.NodeId, req.RaftAddr)
	if err != nil {
		return nil, raftError(err)
	}
	mem := fsm.Member{NodeID: req.NodeId, RaftAddr: req.RaftAddr, APIAddr: req.ApiAddr, PeerAddr: req.PeerAddr}
	if _, err := s.m.raft.Propose(ctx, fsm.EncodeSetMember(fsm.SetMember{TxnID: kvoffload.NewTxnID(), Member: mem})); err != nil {
		return nil, raftError(err)
	}
	s.m.log.Info("member joined", "id", req.NodeId, "raft", req.RaftAddr, "api", req.ApiAddr, "peer", req.PeerAddr, "voter", voter, "by", callerOf(ctx))
	return &pb.JoinResponse{Voter: voter, ClusterId: s.m.ClusterID()}, nil
}

// leaveRemoveBatch is the most keys one REMOVE command of Leave names.
const leaveRemoveBatch = 4096

// Leave removes a node from the Raft configuration and the member directory, then drops the
// keys whose bytes it held from the metadata (dropOwnerKeys). The leader leaving hands
// leadership over first, so the new leader records the removal. A node that is no longer a
// member but still owns keys (an earlier Leave cut short) gets its keys dropped again.
//
// With TLS, only the node itself or an operator (OperatorUnit) may ask, and a member that is
// not the leader redirects the caller to it instead of forwarding (forwarding would put this
// member's identity in place of the caller's).
func (s clusterService) Leave(ctx context.Context, req *pb.LeaveRequest) (*pb.LeaveResponse, error) {
	caller := callerOf(ctx)
	if s.m.tls != nil && caller.name != req.NodeId && !caller.operator {
		s.m.log.Warn("leave refused", "id", req.NodeId, "by", caller)
		return nil, status.Errorf(codes.PermissionDenied, "leave of node %q by %s: only the node itself or an operator certificate (OU %s) may remove a member", req.NodeId, caller, devca.OperatorUnit)
	}
	_, member := s.m.fsm.Member(req.NodeId)
	if !member && s.m.fsm.Owners()[req.NodeId].Keys == 0 {
		return nil, status.Errorf(codes.NotFound, "node ID %s is not a member", req.NodeId)
	}
	if req.NodeId == s.m.cfg.ID && s.m.raft.IsLeader() {
		if err := s.m.raft.TransferLeadership(ctx); err != nil {
			return nil, raftError(err)
		}
	}
	if resp, relayed, err := toLeader(ctx, s, func(cl pb.ClusterClient) (*pb.LeaveResponse, error) {
		return cl.Leave(ctx, req)
	}); relayed {
		return resp, err
	}
	if member {
		if err := s.m.raft.RemoveMember(ctx, req.NodeId); err != nil {
			return nil, raftError(err)
		}
		cmd := fsm.EncodeSetMember(fsm.SetMember{TxnID: kvoffload.NewTxnID(), Member: fsm.Member{NodeID: req.NodeId}, Remove: true})
		if _, err := s.m.raft.Propose(ctx, cmd); err != nil {
			return nil, raftError(err)
		}
	}
	dropped, err := s.dropOwnerKeys(ctx, req.NodeId)
	if err != nil {
		return nil, err
	}
	s.m.log.Info("member left", "id", req.NodeId, "keys_dropped", dropped, "by", caller)
	return &pb.LeaveResponse{KeysDropped: dropped}, nil
}

// dropOwnerKeys removes from the metadata, through Raft, every key whose bytes node owner
// holds, in REMOVE commands of at most leaveRemoveBatch keys. Each names the generation it
// saw, so a key stored again since (by another node) stays.
func (s clusterService) dropOwnerKeys(ctx context.Context, owner string) (uint64, error) {
	var keys []fsm.KeyGen
	s.m.fsm.ForEach(func(e fsm.Entry) bool {
		if e.Owner == owner {
			keys = append(keys, fsm.KeyGen{Key: e.Key, Gen: e.Gen})
		}
		return true
	})
	var dropped uint64
	for len(keys) > 0 {
		n := min(len(keys), leaveRemoveBatch)
		cmd := fsm.EncodeRemove(fsm.Remove{TxnID: kvoffload.NewTxnID(), Keys: keys[:n], Reason: "owner " + owner + " left the cluster"})
		res, err := s.m.raft.Propose(ctx, cmd)
		if err != nil {
			return dropped, raftError(fmt.Errorf("dropping the keys of %s (%d done; retry Leave to finish): %w", owner, dropped, err))
		}
		for _, k := range res.Keys {
			if k.Outcome == fsm.OutcomeRemoved {
				dropped++
			}
		}
		keys = keys[n:]
	}
	return dropped, nil
}

// Status describes the cluster as this node sees it.
func (s clusterService) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	leader, _ := s.m.raft.Leader()
	servers, err := s.m.raft.Servers()
	if err != nil {
		return nil, raftError(err)
	}
	owners := s.m.fsm.Owners()
	st := s.m.fsm.Stats()
	out := &pb.StatusResponse{LeaderId: leader, AppliedIndex: s.m.raft.AppliedIndex(), Keys: uint64(st.Keys), Bytes: uint64(st.Bytes), ClusterId: s.m.ClusterID(),
		Build: s.m.cfg.Build, FreeBytes: -1}
	if free, reserve, err := s.m.host.Space(); err == nil {
		out.FreeBytes, out.ReserveBytes = free, reserve
	}
	dir := map[string]fsm.Member{}
	for _, mem := range s.m.fsm.Members() {
		dir[mem.NodeID] = mem
	}
	for _, sv := range servers {
		m := dir[sv.ID]
		o := owners[sv.ID]
		out.Members = append(out.Members, &pb.Member{
			NodeId: sv.ID, RaftAddr: sv.Address, ApiAddr: m.APIAddr, PeerAddr: m.PeerTarget(), Voter: sv.Voter,
			Leader: sv.ID == leader, Keys: uint64(o.Keys), Bytes: uint64(o.Bytes),
		})
	}
	return out, nil
}

// Propose applies a forwarded command on the leader. A COMMIT from a node that is not in the
// Raft configuration (removed, its process still running) is refused: Leave has dropped or
// is dropping that node's keys, and new ones would point at bytes no member serves.
func (s clusterService) Propose(ctx context.Context, req *pb.ProposeRequest) (*pb.ProposeResponse, error) {
	typ, cmd, err := fsm.Decode(req.Command)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "propose: %v", err)
	}
	if err := s.authorize(ctx, typ, cmd); err != nil {
		return nil, err
	}
	if c, ok := cmd.(fsm.Commit); ok && s.m.raft.IsLeader() {
		if err := s.m.fsm.CheckCommit(c, callerOf(ctx).name, s.m.cfg.MaxRecordLen); err != nil {
			s.m.log.Warn("forwarded commit refused", "node", c.Node, "by", callerOf(ctx), "err", err)
			return nil, status.Errorf(codes.InvalidArgument, "propose: %v", err)
		}
	}
	res, err := s.m.raft.Propose(ctx, req.Command)
	if err != nil {
		return nil, raftError(err)
	}
	return &pb.ProposeResponse{Result: fsm.EncodeResult(res)}, nil
}

// Barrier runs a Raft barrier on the leader and returns its applied index. Each costs an
// entry on every voter, so, with TLS, only members may ask (requireMember).
func (s clusterService) Barrier(ctx context.Context, _ *pb.BarrierRequest) (*pb.BarrierResponse, error) {
	if err := s.requireMember(callerOf(ctx)); err != nil {
		return nil, err
	}
	if err := s.m.raft.Barrier(ctx); err != nil {
		return nil, raftError(err)
	}
	return &pb.BarrierResponse{AppliedIndex: s.m.raft.AppliedIndex()}, nil
}

// ReadIndex returns the leader's read index (raftmeta.Node.ReadIndex). A node that is not in
// the Raft configuration (removed, but still running) is refused: it would wait for entries
// it no longer receives.
func (s clusterService) ReadIndex(ctx context.Context, req *pb.ReadIndexRequest) (*pb.ReadIndexResponse, error) {
	if caller := callerOf(ctx); s.m.tls != nil && caller.name != req.NodeId {
		return nil, status.Errorf(codes.PermissionDenied, "read index for node %q asked by %s", req.NodeId, caller)
	}
	if err := s.refuseNonMember(req.NodeId); err != nil {
		return nil, err
	}
	index, err := s.m.raft.ReadIndex(ctx)
	if err != nil {
		return nil, raftError(err)
	}
	return &pb.ReadIndexResponse{ReadIndex: index}, nil
}

// authorize decides whether the caller may propose cmd. Members forward only COMMIT, ABORT
// and REMOVE commands (txn.Meta); membership changes go through Join and Leave, and pruning
// is the leader's own, so a forwarded Member or Prune command is refused. A COMMIT from a
// node outside the configuration is refused (refuseNonMember), and so is an ABORT, whose
// reason is also bounded (fsm.MaxAbortReason). With TLS, a COMMIT or ABORT must be in the
// caller's own name: a node cannot record keys as another node's bytes.
func (s clusterService) authorize(ctx context.Context, typ fsm.CommandType, cmd any) error {
	caller := callerOf(ctx)
	var node string
	switch typ {
	case fsm.CmdCommit:
		node = cmd.(fsm.Commit).Node
		if err := s.refuseNonMember(node); err != nil {
			return err
		}
	case fsm.CmdAbort:
		a := cmd.(fsm.Abort)
		if len(a.Reason) > fsm.MaxAbortReason {
			return status.Errorf(codes.InvalidArgument, "an ABORT's reason of %d bytes: the limit is %d (fsm.MaxAbortReason)", len(a.Reason), fsm.MaxAbortReason)
		}
		node = a.Node
		if err := s.refuseNonMember(node); err != nil {
			return err
		}
	case fsm.CmdRemove:
		return s.requireMember(caller)
	default:
		s.m.log.Warn("forwarded command refused", "type", typ, "by", caller)
		return status.Errorf(codes.PermissionDenied, "a %s command is not accepted from peers (membership changes go through Join and Leave)", typ)
	}
	if s.m.tls != nil && (caller.name != node || caller.operator) {
		s.m.log.Warn("forwarded command refused: not in the caller's name", "type", typ, "node", node, "by", caller)
		return status.Errorf(codes.PermissionDenied, "a %s in the name of node %q from %s: a node proposes only its own transactions", typ, node, caller)
	}
	return nil
}

// requireMember, with TLS, refuses a caller that is an operator or is not in this node's
// Raft configuration (a removed member whose certificate is still valid): REMOVE, ReadLocal
// and Barrier are for members only.
func (s clusterService) requireMember(caller identity) error {
	if s.m.tls == nil {
		return nil
	}
	if caller.operator {
		return status.Errorf(codes.PermissionDenied, "%s: operators may not remove keys, read a node's bytes or run a barrier", caller)
	}
	member, err := s.m.raft.HasServer(caller.name)
	if err != nil {
		return raftError(err)
	}
	if !member {
		s.m.log.Warn("peer call refused: not a member", "by", caller)
		return status.Errorf(codes.PermissionDenied, "%s is not in the cluster configuration", caller)
	}
	return nil
}

// LeaderTrailer is the trailer key of a redirect: the leader's peer address.
const LeaderTrailer = "kvoffload-leader-peer"

// redirect answers a call this member will not forward: FailedPrecondition naming the
// leader's peer address, which is also sent in the LeaderTrailer trailer for programs.
func (s clusterService) redirect(ctx context.Context) error {
	id, _ := s.m.raft.Leader()
	mem, ok := s.m.fsm.Member(id)
	if id == "" || !ok || mem.PeerTarget() == "" {
		return status.Error(codes.Unavailable, "this member is not the leader and knows no leader yet: retry")
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs(LeaderTrailer, mem.PeerTarget()))
	return status.Errorf(codes.FailedPrecondition, "not the leader: call the leader %s at its peer address %s", id, mem.PeerTarget())
}

// refuseNonMember, on the leader, returns PermissionDenied for a node that is not in the Raft
// configuration (removed, its process still running); nil elsewhere. When that configuration
// is committed, the refusal carries the NOT_A_MEMBER ErrorInfo, from which the node learns it
// was removed (forward.Leader.OnRemoved) and refuses every call until it is stopped; a removal
// not yet committed could still be lost to a leader change, so it refuses only this call.
func (s clusterService) refuseNonMember(id string) error {
	if !s.m.raft.IsLeader() {
		return nil
	}
	outside, committed, err := s.m.raft.Outside(id)
	if err != nil {
		return raftError(err)
	}
	if !outside {
		return nil
	}
	st := status.Newf(codes.PermissionDenied, "node %q is not in the cluster configuration (removed?): stop it, or join a fresh node under a new ID", id)
	if committed {
		if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: forward.ReasonNotAMember, Domain: forward.ErrorDomain}); err == nil {
			st = d
		}
	}
	return st.Err()
}

// ReadLocal serves a read forwarded by another member, for keys this node owns
// (Host.ReadLocal), once this node is ready.
func (s clusterService) ReadLocal(req *pb.GetRequest, stream grpc.ServerStreamingServer[pb.GetChunk]) error {
	if err := s.m.host.Ready(stream.Context()); err != nil {
		return err
	}
	if err := s.requireMember(callerOf(stream.Context())); err != nil {
		return err
	}
	return s.m.host.ReadLocal(req, stream)
}

// raftError maps raftmeta errors: FailedPrecondition means "not the leader, look again",
// Unavailable means the outcome is unknown or the node is going away.
// toLeader passes a Join or Leave that reached a follower on to the leader: with peer TLS
// the caller is redirected (a follower does not relay a node's certificate), without it the
// follower relays call to the leader. relayed is false on the leader, which serves it.
func toLeader[R any](ctx context.Context, s clusterService, call func(pb.ClusterClient) (R, error)) (resp R, relayed bool, err error) {
	if s.m.raft.IsLeader() {
		return resp, false, nil
	}
	if s.m.tls != nil {
		return resp, true, s.redirect(ctx)
	}
	cl, err := s.m.leader.Client(ctx)
	if err != nil {
		return resp, true, status.Error(codes.Unavailable, err.Error())
	}
	resp, err = call(cl)
	return resp, true, err
}

func raftError(err error) error {
	switch {
	case errors.Is(err, raftmeta.ErrNotLeader):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, raftmeta.ErrInvalidCommand):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, raftmeta.ErrIndeterminate), errors.Is(err, raftmeta.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, fmt.Sprintf("raft: %v", err))
}
