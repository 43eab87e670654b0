package raftmeta

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/third_party/raft"
)

// clusterConfig is testConfig without bootstrap and with raft's default
// 1s heartbeat: several nodes under -race on a loaded 2-core machine must
// not lose leadership to scheduling stalls. Tests still retry on a new
// leader (leaderDo) should it happen.
func clusterConfig(t *testing.T, id string) Config {
	t.Helper()
	cfg := testConfig(t, id, t.TempDir())
	cfg.Bootstrap = false
	cfg.HeartbeatTimeout = time.Second
	cfg.ElectionTimeout = time.Second
	cfg.LeaderLeaseTimeout = 500 * time.Millisecond
	cfg.CommitTimeout = 10 * time.Millisecond
	return cfg
}

// openCluster opens n unjoined nodes; the first bootstraps. tcp selects TCP
// transports on 127.0.0.1:0, else in-memory transports in a full mesh.
func openCluster(t *testing.T, n int, tcp bool) ([]*Node, []*fsm.FSM) {
	t.Helper()
	var nodes []*Node
	var fsms []*fsm.FSM
	for i := range n {
		cfg := clusterConfig(t, fmt.Sprintf("n%d", i+1))
		cfg.Bootstrap = i == 0
		if tcp {
			cfg.BindAddr = "127.0.0.1:0"
		}
		nd, f := mustOpen(t, cfg)
		nodes, fsms = append(nodes, nd), append(fsms, f)
	}
	if !tcp {
		for _, a := range nodes {
			for _, b := range nodes {
				if a != b {
					a.trans.(*raft.InmemTransport).Connect(b.trans.LocalAddr(), b.trans)
				}
			}
		}
	}
	return nodes, fsms
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// leaderDo runs op on whichever of nodes leads, retrying on the next leader
// while the outcome is ErrNotLeader or ErrIndeterminate. Every op used with
// it is idempotent (TxnID de-duplication, AddMember, RemoveMember).
func leaderDo(ctx context.Context, nodes []*Node, op func(*Node) error) (*Node, error) {
	for {
		var l *Node
		for _, n := range nodes {
			if n.IsLeader() {
				l = n
				break
			}
		}
		if l != nil {
			err := op(l)
			if err == nil || !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrIndeterminate) {
				return l, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no leader completed the operation: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func mustLeaderDo(t *testing.T, nodes []*Node, what string, op func(*Node) error) *Node {
	t.Helper()
	l, err := leaderDo(ctxT(t), nodes, op)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return l
}

func proposeAny(t *testing.T, nodes []*Node, cmd []byte) {
	t.Helper()
	mustLeaderDo(t, nodes, "propose", func(l *Node) error { _, err := l.Propose(ctxT(t), cmd); return err })
}

func addAny(t *testing.T, nodes []*Node, id, addr string, wantVoter bool) {
	t.Helper()
	mustLeaderDo(t, nodes, "AddMember "+id, func(l *Node) error {
		voter, err := l.AddMember(ctxT(t), id, addr)
		if err == nil && voter != wantVoter {
			t.Fatalf("AddMember(%s at %s) = voter %v, want %v", id, addr, voter, wantVoter)
		}
		return err
	})
}

func mustServers(t *testing.T, n *Node) []Server {
	t.Helper()
	s, err := n.Servers()
	if err != nil {
		t.Fatalf("Servers: %v", err)
	}
	return s
}

func voters(ss []Server) (v, nv []string) {
	for _, s := range ss {
		if s.Voter {
			v = append(v, s.ID)
		} else {
			nv = append(nv, s.ID)
		}
	}
	return v, nv
}

func converged(fsms []*fsm.FSM) bool {
	for _, f := range fsms[1:] {
		if f.Hash() != fsms[0].Hash() {
			return false
		}
	}
	return true
}

// leaderOf polls until one of nodes leads, and returns it.
func leaderOf(t *testing.T, nodes []*Node) *Node {
	t.Helper()
	var l *Node
	testkit.Eventually(t, 15*time.Second, "a leader", func() bool {
		for _, n := range nodes {
			if n.IsLeader() {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

func without(nodes []*Node, x *Node) []*Node {
	return slices.DeleteFunc(slices.Clone(nodes), func(n *Node) bool { return n == x })
}

func waitSignal(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: no signal", what)
	}
}

// TestTCPClusterMembership builds a 3-node cluster over TCP with AddMember,
// checks replication of data and member records, leadership transfer (with
// OnLeader on the new leader) and RemoveMember.
func TestTCPClusterMembership(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	nodes, fsms := openCluster(t, 3, true)
	became := make([]chan struct{}, len(nodes))
	for i, n := range nodes {
		became[i] = make(chan struct{}, 64)
		n.OnLeader(func() { became[i] <- struct{}{} })
	}
	n1 := nodes[0]
	mustLead(t, n1) // the only voter: it cannot lose leadership yet
	waitSignal(t, became[0], "OnLeader on the bootstrapped node")
	if got := n1.State(); got != "Leader" {
		t.Fatalf("State = %q", got)
	}

	ctx := ctxT(t)
	if _, err := nodes[1].AddMember(ctx, "x", "127.0.0.1:1"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("AddMember on a non-member: %v, want ErrNotLeader", err)
	}
	if _, err := n1.AddMember(ctx, "", "a"); !errors.Is(err, ErrInvalidMember) {
		t.Fatalf("AddMember with empty ID: %v", err)
	}
	for _, n := range nodes[1:] {
		addAny(t, nodes, n.cfg.NodeID, n.Addr(), true)
	}
	addAny(t, nodes, "n3", nodes[2].Addr(), true) // idempotent
	for i, n := range nodes {
		proposeAny(t, nodes, fsm.EncodeSetMember(fsm.SetMember{TxnID: txnID(1000 + i),
			Member: fsm.Member{NodeID: n.cfg.NodeID, RaftAddr: n.Addr(), APIAddr: fmt.Sprintf("127.0.0.1:%d", 9000+i)}}))
	}
	for i := range 20 {
		proposeAny(t, nodes, commitCmd(i, fmt.Sprint("k", i), 1))
	}
	testkit.Eventually(t, 15*time.Second, "the FSMs to converge", func() bool { return converged(fsms) })
	if ms := fsms[2].Members(); len(ms) != 3 || ms[1].RaftAddr != nodes[1].Addr() {
		t.Fatalf("replicated members %+v", ms)
	}

	want := []Server{}
	for _, n := range nodes {
		want = append(want, Server{ID: n.cfg.NodeID, Address: n.Addr(), Voter: true})
	}
	for _, n := range nodes {
		testkit.Eventually(t, 15*time.Second, "every node to list the servers", func() bool { return slices.Equal(mustServers(t, n), want) })
	}
	testkit.Eventually(t, 15*time.Second, "every node to name the same leader", func() bool { // everyone names the same leader
		l := leaderOf(t, nodes)
		for _, n := range nodes {
			if id, addr := n.Leader(); id != l.cfg.NodeID || addr != l.Addr() {
				return false
			}
		}
		return true
	})
	old := leaderOf(t, nodes)
	follower := without(nodes, old)[0]
	if got := follower.State(); got != "Follower" {
		t.Fatalf("follower State = %q", got)
	}
	if err := follower.TransferLeadership(ctx); err != nil {
		t.Fatalf("TransferLeadership on a follower: %v, want a no-op", err)
	}

	// Graceful hand-off: leadership moves, and OnLeader fires on the new leader.
	for _, ch := range became {
		for len(ch) > 0 {
			<-ch
		}
	}
	if err := old.TransferLeadership(ctx); err != nil {
		t.Fatalf("TransferLeadership: %v", err)
	}
	if old.IsLeader() {
		t.Fatal("still leader after TransferLeadership")
	}
	rest := without(nodes, old)
	newLeader := leaderOf(t, rest)
	waitSignal(t, became[slices.Index(nodes, newLeader)], "OnLeader on the new leader")
	t.Logf("leadership moved from %s to %s", old.cfg.NodeID, newLeader.cfg.NodeID)

	// Remove the old leader; it leaves the configuration everywhere.
	if err := without(rest, newLeader)[0].RemoveMember(ctx, old.cfg.NodeID); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("RemoveMember on a follower: %v, want ErrNotLeader", err)
	}
	for range 2 { // the second time it is absent: no error
		mustLeaderDo(t, rest, "RemoveMember", func(l *Node) error { return l.RemoveMember(ctxT(t), old.cfg.NodeID) })
	}
	proposeAny(t, rest, commitCmd(500, "after-remove", 1))
	var wantVoters []string
	for _, n := range rest {
		wantVoters = append(wantVoters, n.cfg.NodeID)
	}
	for _, n := range rest {
		testkit.Eventually(t, 15*time.Second, "the rest to be the only voters", func() bool {
			v, nv := voters(mustServers(t, n))
			return slices.Equal(v, wantVoters) && len(nv) == 0
		})
	}
	var restFSMs []*fsm.FSM
	for _, n := range rest {
		restFSMs = append(restFSMs, fsms[slices.Index(nodes, n)])
	}
	testkit.Eventually(t, 15*time.Second, "the rest's FSMs to converge", func() bool { return converged(restFSMs) })
	if _, ok := fsms[slices.Index(nodes, old)].Lookup("after-remove"); ok {
		t.Fatal("a removed member still receives the log")
	}
}

// TestMaxVoters: in a 6-node in-memory cluster the sixth member joins as a
// non-voter but still replicates; re-adding at a new address keeps the
// suffrage; removing a voter promotes the non-voter.
func TestMaxVoters(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	nodes, fsms := openCluster(t, 6, false)
	mustLead(t, nodes[0])
	for _, n := range nodes[1:MaxVoters] {
		addAny(t, nodes, n.cfg.NodeID, n.Addr(), true)
	}
	addAny(t, nodes, "n6", nodes[5].Addr(), false)
	addAny(t, nodes, "n6", nodes[5].Addr(), false) // idempotent: still a non-voter
	v, nv := voters(mustServers(t, leaderOf(t, nodes)))
	if !slices.Equal(v, []string{"n1", "n2", "n3", "n4", "n5"}) || !slices.Equal(nv, []string{"n6"}) {
		t.Fatalf("voters %v non-voters %v", v, nv)
	}
	for i := range 10 {
		proposeAny(t, nodes, commitCmd(i, fmt.Sprint("k", i), 1))
	}
	testkit.Eventually(t, 15*time.Second, "the FSMs to converge", func() bool { return converged(fsms) })

	// The same ID at a new address: re-added there, suffrage kept. Then back.
	// The moved voter is one that does not lead.
	moved := without(nodes[:MaxVoters], leaderOf(t, nodes))[1]
	for _, addr := range []string{"elsewhere", moved.Addr()} {
		addAny(t, nodes, moved.cfg.NodeID, addr, true)
		ss := mustServers(t, leaderOf(t, nodes))
		if i := slices.IndexFunc(ss, func(s Server) bool { return s.ID == moved.cfg.NodeID }); ss[i].Address != addr || !ss[i].Voter {
			t.Fatalf("%s not re-added at %s: %+v", moved.cfg.NodeID, addr, ss)
		}
	}
	addAny(t, nodes, "n6", "elsewhere6", false) // a non-voter stays one: five voters
	addAny(t, nodes, "n6", nodes[5].Addr(), false)

	// Removing a voter (not the leader) promotes the non-voter.
	gone := without(nodes[:MaxVoters], leaderOf(t, nodes))[2]
	l := mustLeaderDo(t, nodes, "RemoveMember", func(l *Node) error { return l.RemoveMember(ctxT(t), gone.cfg.NodeID) })
	v, nv = voters(mustServers(t, l))
	wantV := []string{}
	for _, n := range nodes {
		if n != gone {
			wantV = append(wantV, n.cfg.NodeID)
		}
	}
	if !slices.Equal(v, wantV) || len(nv) != 0 {
		t.Fatalf("after removing %s: voters %v non-voters %v, want voters %v", gone.cfg.NodeID, v, nv, wantV)
	}
	proposeAny(t, nodes, commitCmd(100, "late", 1))
	live := slices.Delete(slices.Clone(fsms), slices.Index(nodes, gone), slices.Index(nodes, gone)+1)
	testkit.Eventually(t, 15*time.Second, "the live FSMs to converge", func() bool { return converged(live) })
}

// TestAddMemberSuffrageRace: concurrent AddMember calls never put more than
// MaxVoters voters in the configuration (the per-node lock and raft's
// prevIndex check serialize them).
func TestAddMemberSuffrageRace(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	nodes, _ := openCluster(t, 7, false)
	mustLead(t, nodes[0])
	var voterCount atomic.Int32
	errs := make(chan error, 6)
	for _, n := range nodes[1:] {
		go func() {
			_, err := leaderDo(ctxT(t), nodes, func(l *Node) error {
				v, err := l.AddMember(ctxT(t), n.cfg.NodeID, n.Addr())
				if err == nil && v {
					voterCount.Add(1)
				}
				return err
			})
			errs <- err
		}()
	}
	for range 6 {
		if err := <-errs; err != nil {
			t.Fatalf("AddMember: %v", err)
		}
	}
	v, nv := voters(mustServers(t, leaderOf(t, nodes)))
	if len(v) != MaxVoters || len(nv) != 2 || voterCount.Load() != MaxVoters-1 {
		t.Fatalf("voters %v non-voters %v, %d reported voter", v, nv, voterCount.Load())
	}
}

// TestOnLeaderSingleNode: a hook registered after the node leads runs once
// right away; hooks are not re-run without a new term.
func TestOnLeaderSingleNode(t *testing.T) {
	n, _ := mustOpen(t, testConfig(t, "n1", t.TempDir()))
	mustLead(t, n)
	var calls atomic.Int32
	done := make(chan struct{}, 4)
	n.OnLeader(func() { calls.Add(1); done <- struct{}{} })
	waitSignal(t, done, "OnLeader registered on a leader")
	time.Sleep(100 * time.Millisecond)
	if c := calls.Load(); c != 1 {
		t.Fatalf("OnLeader ran %d times, want 1", c)
	}
	if id, addr := n.Leader(); id != "n1" || addr != "n1" || n.Addr() != "n1" {
		t.Fatalf("Leader() = %q %q, Addr %q", id, addr, n.Addr())
	}
	if err := n.TransferLeadership(context.Background()); err != nil || !n.IsLeader() {
		t.Fatalf("TransferLeadership without another voter: %v, leader %v", err, n.IsLeader())
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if got := n.State(); got != "Shutdown" {
		t.Fatalf("State after Close = %q", got)
	}
	if _, err := n.AddMember(context.Background(), "n2", "n2"); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddMember after Close: %v", err)
	}
	if _, err := n.Servers(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Servers after Close: %v", err)
	}
}

// TestAdvertiseAddr: a node bound to the wildcard address advertises (and
// bootstraps with) AdvertiseAddr.
func TestAdvertiseAddr(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := testConfig(t, "n1", t.TempDir())
	cfg.BindAddr = fmt.Sprintf("0.0.0.0:%d", port)
	cfg.AdvertiseAddr = fmt.Sprintf("127.0.0.1:%d", port)
	n, _ := mustOpen(t, cfg)
	mustLead(t, n)
	if got := mustServers(t, n); len(got) != 1 || got[0].Address != cfg.AdvertiseAddr || !got[0].Voter || n.Addr() != cfg.AdvertiseAddr {
		t.Fatalf("Servers %+v, Addr %q, want %s", got, n.Addr(), cfg.AdvertiseAddr)
	}
	mustPropose(t, n, commitCmd(1, "a", 1))
}

func TestValidateAddrs(t *testing.T) {
	for _, tc := range []struct {
		bind, adv, wantErr string
	}{
		{"", "", ""},
		{"127.0.0.1:0", "", ""},
		{"0.0.0.0:7000", "10.0.0.1:7000", ""},
		{"[::]:7000", "node1.example:7000", ""},
		{"", "10.0.0.1:7000", "needs a BindAddr"},
		{"0.0.0.0:7000", "", "wildcard"},
		{":7000", "", "wildcard"},
		{"nonsense", "", "BindAddr"},
		{"0.0.0.0:7000", "10.0.0.1", "AdvertiseAddr"},
		{"0.0.0.0:7000", "0.0.0.0:7000", "not dialable"},
		{"0.0.0.0:0", "10.0.0.1:0", "needs a port"},
	} {
		cfg := DefaultConfig("n1", "d")
		cfg.BindAddr, cfg.AdvertiseAddr = tc.bind, tc.adv
		err := cfg.Validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("bind %q advertise %q: %v, want %q", tc.bind, tc.adv, err, tc.wantErr)
		}
	}
}

// Outside: a member is inside; an ID the configuration lacks is outside, and once the
// configuration's entry is committed (a single voter commits its own at once), that is final.
func TestOutside(t *testing.T) {
	n, _ := mustOpen(t, testConfig(t, "n1", t.TempDir()))
	mustLead(t, n)
	if out, committed, err := n.Outside("n1"); err != nil || out || committed {
		t.Fatalf("Outside(n1) on its own leader: %v %v %v, want inside", out, committed, err)
	}
	testkit.Eventually(t, 5*time.Second, "gone's removal to commit", func() bool { _, c, _ := n.Outside("gone"); return c })
	if out, committed, err := n.Outside("gone"); err != nil || !out || !committed {
		t.Fatalf("Outside(gone): %v %v %v, want outside, committed", out, committed, err)
	}
}
