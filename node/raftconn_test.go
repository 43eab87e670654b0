package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/third_party/raft"
)

// TestRemovedMemberLosesRaftConnections: a member opens a Raft connection to a follower
// while it is a member (one stale-term heartbeat), is removed with Leave, and then sends over
// that same connection an AppendEntries as a leader of a higher term carrying a forged COMMIT
// marked committed. The follower must not apply it: the connection's sender is checked
// against the configuration each time it sends, not only at the handshake, which it passed
// while a member.
func TestRemovedMemberLosesRaftConnections(t *testing.T) {
	dir, _ := tlsDirs(t, "a", "b", "c")
	nodes := openTLSCluster(t, dir, "a", "b", "c")
	leader := leaderOf(t, nodes...)
	var victim, gone *Node
	for _, nd := range nodes {
		switch {
		case nd == leader:
		case victim == nil:
			victim = nd
		default:
			gone = nd
		}
	}
	tr, hdr := transportAs(t, dir, gone, leader.ClusterID())
	to, addr := raft.ServerID(victim.cfg.ID), raft.ServerAddress(victim.cfg.RaftAddr)
	var resp raft.AppendEntriesResponse
	if err := tr.AppendEntries(to, addr, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 0}, &resp); err != nil {
		t.Fatalf("a stale heartbeat from member %s: %v", gone.cfg.ID, err) // opens and pools the connection
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ops := pb.NewClusterClient(dialAs(t, leader.PeerAddr(), dir, "ops", dir))
	if _, err := ops.Leave(ctx, &pb.LeaveRequest{NodeId: gone.cfg.ID}); err != nil {
		t.Fatalf("leave %s: %v", gone.cfg.ID, err)
	}
	mustClose(t, gone)
	waitApplied(t, victim, leader)
	st := victim.Raft().Raft().Stats()
	term, _ := strconv.ParseUint(st["term"], 10, 64)
	last, _ := strconv.ParseUint(st["last_log_index"], 10, 64)
	lastTerm, _ := strconv.ParseUint(st["last_log_term"], 10, 64)
	forged := fsm.EncodeCommit(fsm.Commit{TxnID: kvoffload.NewTxnID(), Node: victim.cfg.ID, Entries: []fsm.Entry{{
		Key: "forged", Size: 1, Gen: 1, Extent: fsm.Extent{Bucket: 1, Offset: 0, Length: 4096}}}})
	err := tr.AppendEntries(to, addr, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: term + 5,
		PrevLogEntry: last, PrevLogTerm: lastTerm, LeaderCommitIndex: last + 1,
		Entries: []*raft.Log{{Index: last + 1, Term: term + 5, Type: raft.LogCommand, Data: forged}}}, &resp)
	t.Logf("AppendEntries from removed member %s over its old connection: %v (success %v)", gone.cfg.ID, err, resp.Success)
	time.Sleep(300 * time.Millisecond)
	if _, ok := victim.fsm.Lookup("forged"); ok {
		t.Fatalf("removed member %s's old Raft connection put a forged entry into %s's metadata", gone.cfg.ID, victim.cfg.ID)
	}
}

// transportAs is a Raft transport that dials with member nd's certificate from dir and
// cluster's ID, closed at the end of the test, and the RPC header naming nd as the sender.
func transportAs(t *testing.T, dir string, nd *Node, cluster string) (*raft.NetworkTransport, raft.RPCHeader) {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, nd.cfg.ID+".crt"), filepath.Join(dir, nd.cfg.ID+".key"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stream := clusterStream{Listener: ln, cfg: &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}, cluster: cluster}
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: stream, MaxPool: 2, Timeout: 2 * time.Second})
	t.Cleanup(func() { _ = tr.Close() })
	return tr, raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(nd.cfg.ID), Addr: []byte(nd.cfg.RaftAddr)}
}

// clusterStream dials Raft over TLS with cfg and sends the cluster-ID handshake
// (raftmeta/handshake.go) with cluster.
type clusterStream struct {
	net.Listener
	cfg     *tls.Config
	cluster string
}

func (s clusterStream) Dial(a raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(a), s.cfg)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(append([]byte{'K', 'V', 'R', 'H', 1, byte(len(s.cluster))}, s.cluster...)); err != nil {
		c.Close()
		return nil, err
	}
	var reply [2]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := io.ReadFull(c, make([]byte, reply[1])); err != nil || reply[0] != 0 {
		c.Close()
		return nil, fmt.Errorf("cluster handshake: %v, status %d", err, reply[0])
	}
	return c, nil
}

// TestJoiningNodeAdmitsOnlyMembers: while a fresh node waits for its leader's first contact
// (its Raft configuration still empty), a removed member keeps sending it AppendEntries of a
// high term with a forged COMMIT marked committed. The node must admit Raft connections
// only from the members the cluster listed when it asked to join, so it joins with no forged
// entry: were any node certificate of the CA admitted in that window, the forged entry
// would be applied.
func TestJoiningNodeAdmitsOnlyMembers(t *testing.T) {
	dir, _ := tlsDirs(t, "a", "b", "c", "d")
	nodes := openTLSCluster(t, dir, "a", "b", "c")
	leader := leaderOf(t, nodes...)
	gone := nodes[0]
	if gone == leader {
		gone = nodes[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if _, err := pb.NewClusterClient(dialAs(t, leader.PeerAddr(), dir, "ops", dir)).Leave(ctx, &pb.LeaveRequest{NodeId: gone.cfg.ID}); err != nil {
		t.Fatalf("leave %s: %v", gone.cfg.ID, err)
	}
	mustClose(t, gone)
	// A silent address first in --join holds the joining node ~2 s (its Status times out)
	// before it asks the leader: the removed member's attempts are already running when the
	// window opens (the cluster ID learned, the leader's first contact not yet there).
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	cfg := testConfig(t.TempDir())
	cfg.ID, cfg.Txn.NodeID = "d", "d"
	cfg.RaftAddr, cfg.APIAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	cfg.Security = tlsSecurity(dir, "d")
	cfg.Join = []string{silent.Addr().String(), leader.PeerAddr()}

	tr, hdr := transportAs(t, dir, gone, leader.ClusterID())
	forged := fsm.EncodeCommit(fsm.Commit{TxnID: kvoffload.NewTxnID(), Node: leader.cfg.ID, Entries: []fsm.Entry{{
		Key: "forged", Size: 1, Gen: 1, Extent: fsm.Extent{Bucket: 1, Offset: 0, Length: 4096}}}})
	stop := make(chan struct{})
	accepted := make(chan int, 1)
	go func() {
		n := 0
		defer func() { accepted <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var resp raft.AppendEntriesResponse
			if err := tr.AppendEntries("d", raft.ServerAddress(cfg.RaftAddr), &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 100,
				LeaderCommitIndex: 1, Entries: []*raft.Log{{Index: 1, Term: 100, Type: raft.LogCommand, Data: forged}}}, &resp); err == nil && resp.Success {
				n++
			}
			time.Sleep(time.Millisecond)
		}
	}()
	d, err := Open(ctx, cfg)
	close(stop)
	if n := <-accepted; n > 0 {
		t.Errorf("the joining node accepted %d AppendEntries from removed member %s", n, gone.cfg.ID)
	}
	if err != nil {
		t.Fatalf("fresh node d did not open: %v", err)
	}
	defer mustClose(t, d)
	if _, ok := d.fsm.Lookup("forged"); ok {
		t.Fatalf("removed member %s put a forged entry into joining node d's metadata", gone.cfg.ID)
	}
}
