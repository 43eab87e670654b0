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
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/internal/forward"
	"github.com/kvoffload/kvoffload/internal/transport"
	"github.com/kvoffload/kvoffload/raftmeta"
)

// startMember starts a cluster member. The cluster ID comes first (every Raft connection
// and peer call carries it), then Raft, the coordinator and both listeners; then the
// membership decisions: whether this node joins (a fresh data directory, or an earlier
// join that never completed), is a member restarting, or was removed; then the wait for a
// leader, the checks a joined node owes the cluster, and recovery.
func (n *Node) startMember(ctx context.Context, fresh bool) (err error) {
	if err := n.openClusterID(fresh); err != nil {
		return err
	}
	rcfg := n.raftConfig()
	rcfg.Bootstrap = len(n.cfg.Join) == 0
	rcfg.TLS, rcfg.ClusterID, rcfg.ClusterOpen = n.tls.raft(n.admitRaftPeer), n.ClusterID, n.clusterOpen
	if err := n.openRaft(rcfg); err != nil {
		return err
	}
	if err := n.recoverClusterID(); err != nil {
		return err
	}
	if n.legacy.Load() {
		go n.watchClusterID()
	}
	n.leader = forward.NewLeader(n.raft, n.fsm, n.peers, n.cfg.ID)
	if err := n.openCoordinator(clusterMeta{meta: meta{n.raft, n.fsm}, leader: n.leader}); err != nil {
		return err
	}
	n.coord.SetRemote(forward.NewOwners(n.fsm, n.peers))
	n.leader.OnRemoved(n.noteRemoved)
	n.raft.OnLeader(n.announce)
	if err := n.serve(); err != nil {
		return err
	}
	fresh, unlisted := n.standing(fresh)
	switch {
	case fresh && len(n.cfg.Join) > 0:
		err = n.join(ctx)
	case len(n.cfg.Join) > 0:
		err = n.checkJoinIgnored(ctx)
	}
	if err != nil {
		return err
	}
	if err := n.waitLeader(ctx, unlisted); err != nil {
		return err
	}
	if fresh {
		if err := n.checkNoPriorKeys(ctx); err != nil {
			return err
		}
	}
	if n.recovery, err = n.coord.Recover(ctx); err != nil {
		return err
	}
	return n.checkReplicatedClusterID()
}

// standing reads this node's place in the cluster from its Raft state. fresh: it is not a
// member yet, because it has no Raft state, or has some but no leader ever sent it an entry
// (a leader replicates only to its members): an earlier join never completed, so it joins
// again. unlisted: it was a member once and its configuration does not list it now:
// removed (see waitLeader), and joining again would undo the Leave.
func (n *Node) standing(hasNoState bool) (fresh, unlisted bool) {
	if hasNoState {
		return true, false
	}
	// Sampled before the configuration: a leader may be replicating to this node right
	// now, and the entry listing it comes after the first ones.
	last := n.raft.Raft().LastIndex()
	if n.inConfiguration() {
		return false, false
	}
	return last == 0, last != 0
}

// checkJoinAddrs refuses an address of cfg.Join that is not host:port: gRPC would dial a
// port-less one at port 443, and a join through it would wait for nothing.
func checkJoinAddrs(join []string) error {
	var errs []error
	for _, a := range join {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			errs = append(errs, fmt.Errorf("node: --join %q is not host:port: give members' --peer-addr, port included", a))
		}
	}
	return errors.Join(errs...)
}

// joinAnswerWait is how long a fresh node's join waits for some address of cfg.Join to
// answer as a member's peer service before it gives up. A member that is restarting listens
// again well within it; an address where nothing listens, whose host does not resolve, or
// where another server answers (a member's HTTP or Raft port) is a mistake that more waiting
// does not mend. Once one address has answered, the join retries until it succeeds: that
// member is not ready yet, or knows no leader yet.
const joinAnswerWait = 10 * time.Second

// join asks the members in cfg.Join, in turn, to add this node, until one accepts.
func (n *Node) join(ctx context.Context) error {
	req := &pb.JoinRequest{NodeId: n.cfg.ID, RaftAddr: n.cfg.raftAdvertise(), ApiAddr: n.APIAddr(), PeerAddr: n.PeerAddr(), ClusterId: n.ClusterID()}
	var last error
	start, answered := time.Now(), false
	unanswered := map[string]error{} // the last error of each address of cfg.Join, until one answers
	for attempt := 0; ; attempt++ {
		addrs := slices.Clone(n.cfg.Join)
		for i := 0; i < len(addrs); i++ {
			addr := addrs[i]
			cl, done, err := n.joinClient(addr, i >= len(n.cfg.Join))
			if err != nil {
				last = err
				continue
			}
			// at is the server that answered the call, if one did: without it the call never
			// reached a gRPC server (nothing listens, the host does not resolve, another
			// protocol or a failed handshake).
			var at peer.Peer
			noteAnswer := func(err error) {
				switch {
				case at.Addr != nil:
					answered = true
				case i < len(n.cfg.Join):
					unanswered[addr] = err
				}
			}
			if req.ClusterId == "" { // learn the cluster's ID first, and take only its Raft traffic
				st, err := statusWithin(ctx, cl, grpc.Peer(&at))
				if status.Code(err) == codes.Unimplemented {
					done()
					return fmt.Errorf("node: --join %s: it does not serve the peer service (kvoffload.v1.Cluster): --join takes members' --peer-addr, not their --api-addr (%v)", addr, err)
				}
				noteAnswer(err)
				if err != nil || st.ClusterId == "" {
					done()
					last = fmt.Errorf("join via %s: asking for the cluster ID: %v", addr, err)
					n.log.Warn("join attempt failed; retrying", "via", addr, "err", last)
					continue
				}
				n.pinJoining(st.ClusterId)
				n.pinJoinAdmit(st.Members)
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var trailer metadata.MD
			resp, err := cl.Join(cctx, req, grpc.Trailer(&trailer), grpc.Peer(&at))
			cancel()
			done()
			noteAnswer(err)
			if to := trailer.Get(leaderTrailer); len(to) == 1 && !slices.Contains(addrs, to[0]) && len(addrs) < len(n.cfg.Join)+maxRedirects {
				addrs = append(addrs, to[0]) // redirected to the leader (TLS: joins are not forwarded)
			}
			if err == nil {
				n.log.Info("joined the cluster", "via", addr, "voter", resp.Voter, "cluster", resp.ClusterId)
				return n.adoptClusterID(resp.ClusterId)
			}
			last = fmt.Errorf("join via %s: %w", addr, err)
			// A refusal is final and is the error Open returns; only a retried attempt is logged.
			if c := status.Code(err); c == codes.AlreadyExists || c == codes.FailedPrecondition && strings.Contains(err.Error(), "cluster ID mismatch") {
				return fmt.Errorf("node: %w", last)
			}
			n.log.Warn("join attempt failed; retrying", "via", addr, "err", err)
		}
		if !answered && time.Since(start) >= joinAnswerWait {
			return n.joinUnanswered(ctx, unanswered)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node: joining: %w (last error: %w)", ctx.Err(), last)
		case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)):
		}
	}
}

// joinUnanswered is join's error when no address of cfg.Join answered as a member's peer
// service within joinAnswerWait: each address with what answered there.
func (n *Node) joinUnanswered(ctx context.Context, last map[string]error) error {
	var what []string
	for _, addr := range n.cfg.Join {
		if err := last[addr]; err != nil {
			what = append(what, fmt.Sprintf("%s: %s", addr, transport.WhatAnswered(ctx, addr, err)))
		}
	}
	return fmt.Errorf("node: --join: no member's peer service answered within %v (--join takes members' --peer-addr): %s", joinAnswerWait, strings.Join(what, "; "))
}

// joinClient returns a client of the member at addr: over the cached connection for an address
// of cfg.Join, over one of its own (closed by done) for a redirect, whose address a peer named.
func (n *Node) joinClient(addr string, redirect bool) (cl pb.ClusterClient, done func(), err error) {
	if redirect {
		return n.peers.Once("", addr)
	}
	cl, err = n.peers.Client(addr)
	return cl, func() {}, err
}

// pinJoinAdmit records the members of the cluster's Status answer as the only peers whose
// Raft connections this fresh node admits until its configuration lists any (admitRaftPeer).
func (n *Node) pinJoinAdmit(members []*pb.Member) {
	ids := make([]string, 0, len(members))
	for _, m := range members {
		ids = append(ids, m.NodeId)
	}
	n.joinAdmit.Store(&ids)
}

// maxRedirects bounds the leader addresses one round of join or clusterLists follows beyond
// the addresses it started with: an answer names the address, and a peer that names a new
// one every time would make a joining node dial without end, a connection each
// (TestJoinRedirectsAreBounded).
const maxRedirects = 8

// inConfiguration reports whether this node appears in its Raft configuration.
func (n *Node) inConfiguration() bool { return n.knowsServer(n.cfg.ID) }

// knowsServer reports whether node id appears in this node's Raft configuration.
func (n *Node) knowsServer(id string) bool {
	servers, err := n.raft.Servers()
	if err != nil {
		return false
	}
	return slices.ContainsFunc(servers, func(sv raftmeta.Server) bool { return sv.ID == id })
}

// removedGrace is how long a node in a cluster waits for a Raft leader before it checks
// whether it was removed from the cluster. A leader contacts the members of its
// configuration every heartbeat, and an election takes about a second.
const removedGrace = 5 * time.Second

// waitLeader waits until this member knows a Raft leader. It also refuses to start a node that was
// removed from the cluster (ErrRemoved), by this rule: a node that was a member (its Raft state
// holds an entry: leaders replicate only to their members) has been removed when, after
// removedGrace without a leader's contact, the cluster's configuration does not list it. The
// cluster's configuration is asked of the members in cfg.Join and in the member directory
// (clusterLists); when none of them knows a leader, the local configuration stands in for it:
// unlisted reports that it does not list this node (standing). So a removed node that received its
// removal is refused after removedGrace even with the other members down, one removed while it was
// down is refused once a member answers, and a node whose first join was cut short while it caught
// up (listed by the leader, not yet by its own log) is contacted by the leader and starts.
func (n *Node) waitLeader(ctx context.Context, unlisted bool) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, removedGrace)
		err := n.raft.WaitLeader(wctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("node: waiting for a Raft leader: %w", err)
		}
		listed, known, leader, at := n.clusterLists(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("node: waiting for a Raft leader: %w", ctx.Err())
		}
		switch {
		case known && !listed:
			// Named, so that an operator who removed no node sees who said so before acting
			// on the advice: a removed member's certificate at an address of --join can
			// claim to lead.
			return n.removedError(fmt.Sprintf("the cluster's leader %s, answering at %s, lists no %s in its Raft configuration; if you did not remove this node, check what answers there before you act", leader, at, n.cfg.ID))
		case !known && unlisted:
			return n.removedError("its Raft state is from an earlier membership, its Raft configuration no longer lists it, and no leader contacts it")
		}
		n.log.Warn("no Raft leader known yet; still waiting", "waited", removedGrace)
	}
}

// noteRemoved is called with the leader's refusal of this node as outside the cluster
// configuration. A node that has finished opening was a member, so it was removed while it
// ran: its coordinator refuses every call from now on (txn.ErrRemoved), and its health and
// readiness say so. A node still opening (joining, not yet in the configuration) ignores it.
func (n *Node) noteRemoved(why error) {
	if st, ok := status.FromError(why); ok {
		why = fmt.Errorf("the leader refused it: %s", st.Message()) // not "rpc error: code = PermissionDenied desc = ..." inside an Unavailable
	}
	select {
	case <-n.ready:
		n.coord.MarkRemoved(why) // and the gRPC health turns NOT_SERVING (notServing)
	default:
	}
}

// removalCheckEvery is how often a running member looks for its own removal in its Raft
// configuration (watchRemoval).
const removalCheckEvery = time.Second

// watchRemoval marks the node removed (noteRemoved) once its own Raft configuration no longer
// lists it and that configuration is committed here: the change reached this node before the
// leader stopped replicating to it. A committed entry is never undone, so no member is marked.
// It covers the node that no call reaches while it still knows the leader, which the leader's
// refusal (noteRemoved's other source) never reaches.
func (n *Node) watchRemoval() {
	t := time.NewTicker(removalCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-n.closing:
			return
		case <-t.C:
		}
		if out, committed, err := n.raft.Outside(n.cfg.ID); err == nil && out && committed {
			n.noteRemoved(errors.New("this node's committed Raft configuration no longer lists it"))
			return
		}
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
// node's join). known reports that the leader answered, leader its ID and at its peer
// address; listed, that it lists this node.
func (n *Node) clusterLists(ctx context.Context) (listed, known bool, leader, at string) {
	addrs := slices.Clone(n.cfg.Join)
	for _, m := range n.fsm.Members() {
		if a := m.PeerTarget(); m.NodeID != n.cfg.ID && a != "" && !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	given := len(addrs)
	for i := 0; i < len(addrs) && ctx.Err() == nil; i++ {
		addr := addrs[i]
		if addr == n.PeerAddr() {
			continue
		}
		st, err := n.peerStatus(ctx, addr)
		if err != nil || st.LeaderId == "" {
			continue
		}
		li := slices.IndexFunc(st.Members, func(m *pb.Member) bool { return m.NodeId == st.LeaderId })
		if li < 0 || st.Members[li].PeerAddr != addr {
			if li >= 0 && st.Members[li].PeerAddr != "" && !slices.Contains(addrs, st.Members[li].PeerAddr) && len(addrs) < given+maxRedirects {
				addrs = append(addrs, st.Members[li].PeerAddr) // ask the leader itself
			}
			continue
		}
		// The answer says it is the leader's own. The leader it names must be a server of
		// this node's own Raft configuration, since a holder of any cluster certificate can
		// name itself leader (a leader this node's stale configuration does not know yet is
		// not taken, and the node keeps waiting for one to contact it). Then ask again over a
		// connection that accepts only that member's certificate (with TLS), so that a holder
		// of another cluster certificate answering at this address cannot make this member
		// believe it was removed and refuse to start (TestStatusImpostorCannotRemove).
		id := st.LeaderId
		if !n.knowsServer(id) {
			continue
		}
		if st, err = n.memberStatus(ctx, id, addr); err != nil || st.LeaderId != id {
			continue
		}
		if lists(st, n.cfg.ID) {
			return true, true, id, addr
		}
		// "Not listed" ends this node's life as a member, so it needs a second witness: a
		// member the leader lists, also in this node's configuration, asked over a connection
		// that accepts only its certificate, naming the same leader and not listing this node
		// either. A member removed while this node was down is still in its configuration and
		// could otherwise name itself leader; without a witness the node keeps waiting
		// (TestStatusImpostorCannotRemove, case leader=c).
		if n.corroborated(ctx, st, id) {
			return false, true, id, addr
		}
	}
	return false, false, "", ""
}

// corroborated reports whether a member of leader's answer st other than the leader itself,
// one this node's Raft configuration lists, confirms over a member-checked connection that
// leader leads and does not list this node.
func (n *Node) corroborated(ctx context.Context, st *pb.StatusResponse, leader string) bool {
	for _, m := range st.Members {
		if m.NodeId == leader || m.NodeId == n.cfg.ID || m.PeerAddr == "" || !n.knowsServer(m.NodeId) {
			continue
		}
		w, err := n.memberStatus(ctx, m.NodeId, m.PeerAddr)
		if err == nil && w.LeaderId == leader && !lists(w, n.cfg.ID) {
			return true
		}
	}
	return false
}

// peerStatus asks whichever member answers at peer address addr for Cluster/Status, within
// 2 s.
func (n *Node) peerStatus(ctx context.Context, addr string) (*pb.StatusResponse, error) {
	cl, err := n.peers.Client(addr)
	if err != nil {
		return nil, err
	}
	return statusWithin(ctx, cl)
}

// memberStatus asks member id at peer address addr for Cluster/Status, within 2 s, over a
// connection of its own (a start-up probe; forward.Peers.Once); with TLS the call fails
// unless the certificate that answers is id's.
func (n *Node) memberStatus(ctx context.Context, id, addr string) (*pb.StatusResponse, error) {
	cl, done, err := n.peers.Once(id, addr)
	if err != nil {
		return nil, err
	}
	defer done()
	return statusWithin(ctx, cl)
}

// lists reports whether a Status answer's members include node id.
func lists(st *pb.StatusResponse, id string) bool {
	return slices.ContainsFunc(st.Members, func(m *pb.Member) bool { return m.NodeId == id })
}

func statusWithin(ctx context.Context, cl pb.ClusterClient, opts ...grpc.CallOption) (*pb.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return cl.Status(ctx, &pb.StatusRequest{}, opts...)
}

// checkNoPriorKeys refuses to start a node that joined with an empty data directory while
// the metadata says its ID owns keys: its recovery would find their buckets missing and
// drop them cluster-wide (G2). Such a node must get a new ID.
func (n *Node) checkNoPriorKeys(ctx context.Context) error {
	if err := n.leader.Barrier(ctx); err != nil {
		return fmt.Errorf("node: catching up after join: %w", err)
	}
	if own := n.fsm.Owners()[n.cfg.ID]; own.Keys > 0 {
		return fmt.Errorf("node: this data directory is new but node ID %s owns %d keys in the cluster: refusing to start (use a new --id; see docs/operations.md)", n.cfg.ID, own.Keys)
	}
	return nil
}

// checkJoinIgnored handles --join given to a node that already has Raft state: the join is
// not done (a member never joins again). Pointing at another cluster is an error naming both
// IDs; pointing at its own, or at members that cannot be asked, a WARN that it is ignored.
// With TLS, the other cluster's ID counts only from a member of this node's own Raft
// configuration (identifiedStatus): a certificate of the CA that is not one could otherwise
// keep this member from starting (TestStatusImpostorCannotRemove, the case naming a cluster);
// its word is logged at ERROR and the join ignored (the Raft transport's cluster-ID
// handshake keeps the clusters apart either way).
func (n *Node) checkJoinIgnored(ctx context.Context) error {
	mine := n.ClusterID()
	for _, addr := range n.cfg.Join {
		st, who, err := n.identifiedStatus(ctx, addr)
		var refusal error
		switch {
		case err != nil && status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "cluster ID mismatch"):
			refusal = fmt.Errorf("%w: --join %s: %s", ErrClusterMismatch, addr, status.Convert(err).Message())
		case err != nil:
			continue
		case st.ClusterId != "" && mine != "" && st.ClusterId != mine:
			refusal = fmt.Errorf("%w: --join %s points at cluster %s, but this data directory belongs to cluster %s: refusing to start (drop --join to restart this member, or use an empty --data to join that cluster as a new node; docs/operations.md)", ErrClusterMismatch, addr, st.ClusterId, mine)
		}
		switch {
		case refusal != nil && n.tls != nil && who == "":
			n.log.Error("--join ignored: a peer that is not a member of this node's Raft configuration says it is in another cluster; starting as a member of this one", "join", addr, "said", refusal, "cluster", mine)
			return nil
		case refusal != nil:
			return refusal
		}
		n.log.Warn("--join ignored: this node has Raft state (--join is used only by a node that has none); it points at this node's own cluster", "join", addr, "cluster", mine)
		return nil
	}
	n.log.Warn("--join ignored: this node already has Raft state (no member in --join answered to compare cluster IDs)", "join", strings.Join(n.cfg.Join, ","), "cluster", mine)
	return nil
}

// identifiedStatus asks the peer at addr for Cluster/Status and, with TLS, says which member of
// this node's Raft configuration answered: the one whose certificate it presented (its
// directory's entry for addr first, then each other server in turn), or "" when it is none of
// them (then it is asked by address). Without TLS who is "" (the network is trusted).
func (n *Node) identifiedStatus(ctx context.Context, addr string) (st *pb.StatusResponse, who string, err error) {
	if n.tls == nil {
		st, err = n.peerStatus(ctx, addr)
		return st, "", err
	}
	var ids []string
	for _, m := range n.fsm.Members() {
		if m.PeerTarget() == addr {
			ids = append(ids, m.NodeID)
		}
	}
	if servers, err := n.raft.Servers(); err == nil {
		for _, sv := range servers {
			ids = append(ids, sv.ID)
		}
	}
	for _, id := range ids {
		if id == n.cfg.ID {
			continue
		}
		if st, err := n.memberStatus(ctx, id, addr); err == nil || status.Code(err) == codes.FailedPrecondition {
			return st, id, err // the handshake passed: id's certificate answered
		}
	}
	st, err = n.peerStatus(ctx, addr)
	return st, "", err
}

// admitRaftPeer accepts a Raft connection from node id when the Raft configuration lists it,
// or while this node knows no configuration yet (a fresh node being added: the leader, which
// it does not know yet, is the first to dial it) when id is a member the cluster listed as
// this node asked to join (pinJoinAdmit), or any id if it has not asked.
func (n *Node) admitRaftPeer(id string) error {
	r := n.raftAdmit.Load()
	if r == nil {
		return nil // raft is starting: no configuration to check against yet
	}
	servers, err := r.Servers()
	if err != nil || len(servers) == 0 {
		// A fresh node waiting for its leader's first contact: only the members the cluster
		// listed when it asked to join (a removed member's certificate stays valid until the
		// CA is rotated, and could write forged entries into a joining node in this window;
		// TestJoiningNodeAdmitsOnlyMembers).
		if ids := n.joinAdmit.Load(); ids != nil && !slices.Contains(*ids, id) {
			n.log.Warn("raft connection refused: not a member the cluster listed when this node asked to join", "peer", id)
			return fmt.Errorf("node: raft: %q is not a member the cluster listed when this node asked to join", id)
		}
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
