package cluster

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
	"github.com/kvoffload/kvoffload/internal/transport"
	"github.com/kvoffload/kvoffload/raftmeta"
)

// Start makes the membership decisions of a member whose Raft, coordinator and listeners
// are open (fresh: it had no Raft state): whether it joins (a fresh data directory, or an
// earlier join that never completed), is a member restarting, or was removed; then it waits
// for a leader and runs the checks a joined node owes the cluster. Recovery comes next, then
// CheckReplicatedClusterID.
func (m *Member) Start(ctx context.Context, fresh bool) (err error) {
	fresh, unlisted := m.standing(fresh)
	switch {
	case fresh && len(m.cfg.Join) > 0:
		err = m.join(ctx)
	case len(m.cfg.Join) > 0:
		err = m.checkJoinIgnored(ctx)
	}
	if err != nil {
		return err
	}
	if err := m.waitLeader(ctx, unlisted); err != nil {
		return err
	}
	if fresh {
		return m.checkNoPriorKeys(ctx)
	}
	return nil
}

// standing reads this node's place in the cluster from its Raft state. fresh: it is not a
// member yet, because it has no Raft state, or has some but no leader ever sent it an entry
// (a leader replicates only to its members): an earlier join never completed, so it joins
// again. unlisted: it was a member once and its configuration does not list it now:
// removed (see waitLeader), and joining again would undo the Leave.
func (m *Member) standing(hasNoState bool) (fresh, unlisted bool) {
	if hasNoState {
		return true, false
	}
	// Sampled before the configuration: a leader may be replicating to this node right
	// now, and the entry listing it comes after the first ones.
	last := m.raft.Raft().LastIndex()
	if m.inConfiguration() {
		return false, false
	}
	return last == 0, last != 0
}

// CheckJoinAddrs refuses an address of cfg.Join that is not host:port: gRPC would dial a
// port-less one at port 443, and a join through it would wait for nothing.
func CheckJoinAddrs(join []string) error {
	var errs []error
	for _, a := range join {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			errs = append(errs, fmt.Errorf("node: --join %q is not host:port: give members' --peer-addr, port included", a))
		}
	}
	return errors.Join(errs...)
}

// JoinAnswerWait is how long a fresh node's join waits for some address of cfg.Join to
// answer as a member's peer service before it gives up. A member that is restarting listens
// again well within it; an address where nothing listens, whose host does not resolve, or
// where another server answers (a member's HTTP or Raft port) is a mistake that more waiting
// does not mend. Once one address has answered, the join retries until it succeeds: that
// member is not ready yet, or knows no leader yet.
const JoinAnswerWait = 10 * time.Second

// join asks the members in cfg.Join, in turn, to add this node, until one accepts.
func (m *Member) join(ctx context.Context) error {
	req := &pb.JoinRequest{NodeId: m.cfg.ID, RaftAddr: m.cfg.RaftAdvertise, ApiAddr: m.host.APIAddr(), PeerAddr: m.host.PeerAddr(), ClusterId: m.ClusterID()}
	var last error
	start, answered := time.Now(), false
	unanswered := map[string]error{} // the last error of each address of cfg.Join, until one answers
	for attempt := 0; ; attempt++ {
		addrs := slices.Clone(m.cfg.Join)
		for i := 0; i < len(addrs); i++ {
			addr := addrs[i]
			cl, done, err := m.joinClient(addr, i >= len(m.cfg.Join))
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
				case i < len(m.cfg.Join):
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
					m.log.Warn("join attempt failed; retrying", "via", addr, "err", last)
					continue
				}
				m.pinJoining(st.ClusterId)
				m.pinJoinAdmit(st.Members)
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var trailer metadata.MD
			resp, err := cl.Join(cctx, req, grpc.Trailer(&trailer), grpc.Peer(&at))
			cancel()
			done()
			noteAnswer(err)
			if to := trailer.Get(LeaderTrailer); len(to) == 1 && !slices.Contains(addrs, to[0]) && len(addrs) < len(m.cfg.Join)+MaxRedirects {
				addrs = append(addrs, to[0]) // redirected to the leader (TLS: joins are not forwarded)
			}
			if err == nil {
				m.log.Info("joined the cluster", "via", addr, "voter", resp.Voter, "cluster", resp.ClusterId)
				return m.adoptClusterID(resp.ClusterId)
			}
			last = fmt.Errorf("join via %s: %w", addr, err)
			// A refusal is final and is the error Open returns; only a retried attempt is logged.
			if c := status.Code(err); c == codes.AlreadyExists || c == codes.FailedPrecondition && strings.Contains(err.Error(), "cluster ID mismatch") {
				return fmt.Errorf("node: %w", last)
			}
			m.log.Warn("join attempt failed; retrying", "via", addr, "err", err)
		}
		if !answered && time.Since(start) >= JoinAnswerWait {
			return m.joinUnanswered(ctx, unanswered)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node: joining: %w (last error: %w)", ctx.Err(), last)
		case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)):
		}
	}
}

// joinUnanswered is join's error when no address of cfg.Join answered as a member's peer
// service within JoinAnswerWait: each address with what answered there.
func (m *Member) joinUnanswered(ctx context.Context, last map[string]error) error {
	var what []string
	for _, addr := range m.cfg.Join {
		if err := last[addr]; err != nil {
			what = append(what, fmt.Sprintf("%s: %s", addr, transport.WhatAnswered(ctx, addr, err)))
		}
	}
	return fmt.Errorf("node: --join: no member's peer service answered within %v (--join takes members' --peer-addr): %s", JoinAnswerWait, strings.Join(what, "; "))
}

// joinClient returns a client of the member at addr: over the cached connection for an address
// of cfg.Join, over one of its own (closed by done) for a redirect, whose address a peer named.
func (m *Member) joinClient(addr string, redirect bool) (cl pb.ClusterClient, done func(), err error) {
	if redirect {
		return m.peers.Once("", addr)
	}
	cl, err = m.peers.Client(addr)
	return cl, func() {}, err
}

// pinJoinAdmit records the members of the cluster's Status answer as the only peers whose
// Raft connections this fresh node admits until its configuration lists any (admitRaftPeer).
func (m *Member) pinJoinAdmit(members []*pb.Member) {
	ids := make([]string, 0, len(members))
	for _, mem := range members {
		ids = append(ids, mem.NodeId)
	}
	m.joinAdmit.Store(&ids)
}

// MaxRedirects bounds the leader addresses one round of join or clusterLists follows beyond
// the addresses it started with: an answer names the address, and a peer that names a new
// one every time would make a joining node dial without end, a connection each
// (TestJoinRedirectsAreBounded).
const MaxRedirects = 8

// inConfiguration reports whether this node appears in its Raft configuration.
func (m *Member) inConfiguration() bool { return m.knowsServer(m.cfg.ID) }

// knowsServer reports whether node id appears in this node's Raft configuration.
func (m *Member) knowsServer(id string) bool {
	servers, err := m.raft.Servers()
	if err != nil {
		return false
	}
	return slices.ContainsFunc(servers, func(sv raftmeta.Server) bool { return sv.ID == id })
}

// RemovedGrace is how long a node in a cluster waits for a Raft leader before it checks
// whether it was removed from the cluster. A leader contacts the members of its
// configuration every heartbeat, and an election takes about a second.
const RemovedGrace = 5 * time.Second

// waitLeader waits until this member knows a Raft leader. It also refuses to start a node that was
// removed from the cluster (ErrRemoved), by this rule: a node that was a member (its Raft state
// holds an entry: leaders replicate only to their members) has been removed when, after
// RemovedGrace without a leader's contact, the cluster's configuration does not list it. The
// cluster's configuration is asked of the members in cfg.Join and in the member directory
// (clusterLists); when none of them knows a leader, the local configuration stands in for it:
// unlisted reports that it does not list this node (standing). So a removed node that received its
// removal is refused after RemovedGrace even with the other members down, one removed while it was
// down is refused once a member answers, and a node whose first join was cut short while it caught
// up (listed by the leader, not yet by its own log) is contacted by the leader and starts.
func (m *Member) waitLeader(ctx context.Context, unlisted bool) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, RemovedGrace)
		err := m.raft.WaitLeader(wctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("node: waiting for a Raft leader: %w", err)
		}
		listed, known, leader, at := m.clusterLists(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("node: waiting for a Raft leader: %w", ctx.Err())
		}
		switch {
		case known && !listed:
			// Named, so that an operator who removed no node sees who said so before acting
			// on the advice: a removed member's certificate at an address of --join can
			// claim to lead.
			return m.removedError(fmt.Sprintf("the cluster's leader %s, answering at %s, lists no %s in its Raft configuration; if you did not remove this node, check what answers there before you act", leader, at, m.cfg.ID))
		case !known && unlisted:
			return m.removedError("its Raft state is from an earlier membership, its Raft configuration no longer lists it, and no leader contacts it")
		}
		m.log.Warn("no Raft leader known yet; still waiting", "waited", RemovedGrace)
	}
}

// noteRemoved is called with the leader's refusal of this node as outside the cluster
// configuration (forward.Leader.OnRemoved), and hands it to Host.Removed.
func (m *Member) noteRemoved(why error) {
	if st, ok := status.FromError(why); ok {
		why = fmt.Errorf("the leader refused it: %s", st.Message()) // not "rpc error: code = PermissionDenied desc = ..." inside an Unavailable
	}
	m.host.Removed(why)
}

// removalCheckEvery is how often a running member looks for its own removal in its Raft
// configuration (WatchRemoval).
const removalCheckEvery = time.Second

// WatchRemoval, run for a ready member's life, marks the node removed (Host.Removed) once its
// own Raft configuration no longer lists it and that configuration is committed here: the
// change reached this node before the leader stopped replicating to it. A committed entry is
// never undone, so no member is marked. It covers the node that no call reaches while it
// still knows the leader, which the leader's refusal (noteRemoved's other source) never
// reaches.
func (m *Member) WatchRemoval() {
	t := time.NewTicker(removalCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-m.cfg.Closing:
			return
		case <-t.C:
		}
		if out, committed, err := m.raft.Outside(m.cfg.ID); err == nil && out && committed {
			m.noteRemoved(errors.New("this node's committed Raft configuration no longer lists it"))
			return
		}
	}
}

func (m *Member) removedError(why string) error { return removedError{id: m.cfg.ID, why: why} }

// ErrRemoved is node.ErrRemoved: Open's error for a node removed from its cluster.
var ErrRemoved = errors.New("node: removed from the cluster")

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
func (m *Member) clusterLists(ctx context.Context) (listed, known bool, leader, at string) {
	addrs := slices.Clone(m.cfg.Join)
	for _, mem := range m.fsm.Members() {
		if a := mem.PeerTarget(); mem.NodeID != m.cfg.ID && a != "" && !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	given := len(addrs)
	for i := 0; i < len(addrs) && ctx.Err() == nil; i++ {
		addr := addrs[i]
		if addr == m.host.PeerAddr() {
			continue
		}
		st, err := m.peerStatus(ctx, addr)
		if err != nil || st.LeaderId == "" {
			continue
		}
		li := slices.IndexFunc(st.Members, func(m *pb.Member) bool { return m.NodeId == st.LeaderId })
		if li < 0 || st.Members[li].PeerAddr != addr {
			if li >= 0 && st.Members[li].PeerAddr != "" && !slices.Contains(addrs, st.Members[li].PeerAddr) && len(addrs) < given+MaxRedirects {
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
		if !m.knowsServer(id) {
			continue
		}
		if st, err = m.memberStatus(ctx, id, addr); err != nil || st.LeaderId != id {
			continue
		}
		if lists(st, m.cfg.ID) {
			return true, true, id, addr
		}
		// "Not listed" ends this node's life as a member, so it needs a second witness: a
		// member the leader lists, also in this node's configuration, asked over a connection
		// that accepts only its certificate, naming the same leader and not listing this node
		// either. A member removed while this node was down is still in its configuration and
		// could otherwise name itself leader; without a witness the node keeps waiting
		// (TestStatusImpostorCannotRemove, case leader=c).
		if m.corroborated(ctx, st, id) {
			return false, true, id, addr
		}
	}
	return false, false, "", ""
}

// corroborated reports whether a member of leader's answer st other than the leader itself,
// one this node's Raft configuration lists, confirms over a member-checked connection that
// leader leads and does not list this node.
func (m *Member) corroborated(ctx context.Context, st *pb.StatusResponse, leader string) bool {
	for _, mem := range st.Members {
		if mem.NodeId == leader || mem.NodeId == m.cfg.ID || mem.PeerAddr == "" || !m.knowsServer(mem.NodeId) {
			continue
		}
		w, err := m.memberStatus(ctx, mem.NodeId, mem.PeerAddr)
		if err == nil && w.LeaderId == leader && !lists(w, m.cfg.ID) {
			return true
		}
	}
	return false
}

// peerStatus asks whichever member answers at peer address addr for Cluster/Status, within
// 2 s.
func (m *Member) peerStatus(ctx context.Context, addr string) (*pb.StatusResponse, error) {
	cl, err := m.peers.Client(addr)
	if err != nil {
		return nil, err
	}
	return statusWithin(ctx, cl)
}

// memberStatus asks member id at peer address addr for Cluster/Status, within 2 s, over a
// connection of its own (a start-up probe; forward.Peers.Once); with TLS the call fails
// unless the certificate that answers is id's.
func (m *Member) memberStatus(ctx context.Context, id, addr string) (*pb.StatusResponse, error) {
	cl, done, err := m.peers.Once(id, addr)
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
func (m *Member) checkNoPriorKeys(ctx context.Context) error {
	if err := m.leader.Barrier(ctx); err != nil {
		return fmt.Errorf("node: catching up after join: %w", err)
	}
	if own := m.fsm.Owners()[m.cfg.ID]; own.Keys > 0 {
		return fmt.Errorf("node: this data directory is new but node ID %s owns %d keys in the cluster: refusing to start (use a new --id; see docs/operations.md)", m.cfg.ID, own.Keys)
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
func (m *Member) checkJoinIgnored(ctx context.Context) error {
	mine := m.ClusterID()
	for _, addr := range m.cfg.Join {
		st, who, err := m.identifiedStatus(ctx, addr)
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
		case refusal != nil && m.tls != nil && who == "":
			m.log.Error("--join ignored: a peer that is not a member of this node's Raft configuration says it is in another cluster; starting as a member of this one", "join", addr, "said", refusal, "cluster", mine)
			return nil
		case refusal != nil:
			return refusal
		}
		m.log.Warn("--join ignored: this node has Raft state (--join is used only by a node that has none); it points at this node's own cluster", "join", addr, "cluster", mine)
		return nil
	}
	m.log.Warn("--join ignored: this node already has Raft state (no member in --join answered to compare cluster IDs)", "join", strings.Join(m.cfg.Join, ","), "cluster", mine)
	return nil
}

// identifiedStatus asks the peer at addr for Cluster/Status and, with TLS, says which member of
// this node's Raft configuration answered: the one whose certificate it presented (its
// directory's entry for addr first, then each other server in turn), or "" when it is none of
// them (then it is asked by address). Without TLS who is "" (the network is trusted).
func (m *Member) identifiedStatus(ctx context.Context, addr string) (st *pb.StatusResponse, who string, err error) {
	if m.tls == nil {
		st, err = m.peerStatus(ctx, addr)
		return st, "", err
	}
	var ids []string
	for _, mem := range m.fsm.Members() {
		if mem.PeerTarget() == addr {
			ids = append(ids, mem.NodeID)
		}
	}
	if servers, err := m.raft.Servers(); err == nil {
		for _, sv := range servers {
			ids = append(ids, sv.ID)
		}
	}
	for _, id := range ids {
		if id == m.cfg.ID {
			continue
		}
		if st, err := m.memberStatus(ctx, id, addr); err == nil || status.Code(err) == codes.FailedPrecondition {
			return st, id, err // the handshake passed: id's certificate answered
		}
	}
	st, err = m.peerStatus(ctx, addr)
	return st, "", err
}

// admitRaftPeer accepts a Raft connection from node id when the Raft configuration lists it,
// or while this node knows no configuration yet (a fresh node being added: the leader, which
// it does not know yet, is the first to dial it) when id is a member the cluster listed as
// this node asked to join (pinJoinAdmit), or any id if it has not asked.
func (m *Member) admitRaftPeer(id string) error {
	r := m.raftAdmit.Load()
	if r == nil {
		return nil // raft is starting: no configuration to check against yet
	}
	servers, err := r.Servers()
	if err != nil || len(servers) == 0 {
		// A fresh node waiting for its leader's first contact: only the members the cluster
		// listed when it asked to join (a removed member's certificate stays valid until the
		// CA is rotated, and could write forged entries into a joining node in this window;
		// TestJoiningNodeAdmitsOnlyMembers).
		if ids := m.joinAdmit.Load(); ids != nil && !slices.Contains(*ids, id) {
			m.log.Warn("raft connection refused: not a member the cluster listed when this node asked to join", "peer", id)
			return fmt.Errorf("node: raft: %q is not a member the cluster listed when this node asked to join", id)
		}
		return nil
	}
	for _, sv := range servers {
		if sv.ID == id {
			return nil
		}
	}
	m.log.Warn("raft connection refused: not in the configuration", "peer", id)
	return fmt.Errorf("node: raft: %q is not in this node's Raft configuration", id)
}
