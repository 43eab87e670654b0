package node

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/third_party/raft"
)

// TestRaftDialChecksTheServer: a holder of a cluster node certificate that is not a member
// ("evil": a removed member, until the CA is rotated) answers at a stopped voter's Raft
// address as a perfect follower, granting votes and acknowledging every entry. The leader's
// transport must refuse the connection (the certificate is not the server's the Raft
// configuration lists there), so no RPC reaches the impostor and, with one voter of three
// up, no offload is acknowledged: without the check the impostor would make the quorum.
func TestRaftDialChecksTheServer(t *testing.T) {
	dir, _ := tlsDirs(t, "a", "b", "c", "evil")
	nodes := openTLSCluster(t, dir, "a", "b", "c")
	leader := leaderOf(t, nodes...)
	mustOffload(t, leader, objects(1, 8<<10, keyOf("pre", 0)))
	var victim string
	for _, nd := range nodes {
		if nd != leader {
			victim = nd.cfg.RaftAddr
			mustClose(t, nd)
		}
	}
	rpcs := startImpostor(t, victim, dir, "evil")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := leader.BatchOffload(ctx, kvoffload.NewTxnID(), objects(2, 8<<10, keyOf("impostor", 0)))
	if err == nil && res[0].Outcome.OK() {
		t.Errorf("an offload was acknowledged with one voter of three up: %+v (the impostor answered %d RPCs)", res, rpcs.Load())
	}
	if n := rpcs.Load(); n > 0 {
		t.Errorf("the impostor at %s answered %d Raft RPCs, want the leader's dial refused", victim, n)
	}
	t.Logf("offload with one voter of three up: %v %+v", err, res)
}

// impostorLayer is a TLS listener that answers the cluster-ID handshake (raftmeta/handshake.go)
// with "accepted" without knowing the cluster's ID.
type impostorLayer struct{ net.Listener }

func (l impostorLayer) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		var hdr [6]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			c.Close()
			continue
		}
		if _, err := io.ReadFull(c, make([]byte, hdr[5])); err != nil {
			c.Close()
			continue
		}
		if _, err := c.Write([]byte{0, 0}); err != nil {
			c.Close()
			continue
		}
		return c, nil
	}
}

func (l impostorLayer) Dial(raft.ServerAddress, time.Duration) (net.Conn, error) { return nil, io.EOF }

// startImpostor serves Raft at addr with dir/name's certificate as a follower that grants
// every vote and acknowledges every entry; it counts the RPCs it answered.
func startImpostor(t *testing.T, addr, dir, name string) *atomic.Int64 {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	for range 100 { // the closed node's port may take a moment to be free
		if ln, err = tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: impostorLayer{ln}, MaxPool: 2, Timeout: time.Second})
	rpcs := new(atomic.Int64)
	done := make(chan struct{})
	t.Cleanup(func() { close(done); _ = tr.Close() })
	go func() {
		hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}
		for {
			select {
			case <-done:
				return
			case rpc := <-tr.Consumer():
				rpcs.Add(1)
				switch req := rpc.Command.(type) {
				case *raft.AppendEntriesRequest:
					last := req.PrevLogEntry
					if n := len(req.Entries); n > 0 {
						last = req.Entries[n-1].Index
					}
					rpc.Respond(&raft.AppendEntriesResponse{RPCHeader: hdr, Term: req.Term, LastLog: last, Success: true}, nil)
				case *raft.RequestVoteRequest:
					rpc.Respond(&raft.RequestVoteResponse{RPCHeader: hdr, Term: req.Term, Granted: true}, nil)
				case *raft.InstallSnapshotRequest:
					_, _ = io.Copy(io.Discard, rpc.Reader)
					rpc.Respond(&raft.InstallSnapshotResponse{RPCHeader: hdr, Term: req.Term, Success: true}, nil)
				default:
					rpc.Respond(nil, io.EOF)
				}
			}
		}
	}()
	return rpcs
}

// TestStatusImpostorCannotRemove: all three members are down; a holder of a cluster node
// certificate that is not a's ("evil") answers Cluster/Status at a's peer address with a
// configuration without b, naming as leader a (whose certificate it does not have) or itself
// (a server b's configuration does not list). Member b, restarted, finds no leader, asks the
// cluster for its configuration (clusterLists) and must not take either answer as the
// leader's: taken, it would refuse to start as removed, telling the operator to start a fresh
// node with an empty data directory.
func TestStatusImpostorCannotRemove(t *testing.T) {
	for _, c := range []struct{ claimed, cert, cluster string }{{"a", "evil", ""}, {"evil", "evil", ""}, {"c", "c", ""},
		{"", "evil", "kv-0000000000000000000000ff"}} {
		t.Run("leader="+c.claimed+",cert="+c.cert+",cluster="+c.cluster, func(t *testing.T) { statusImpostor(t, c.claimed, c.cert, c.cluster) })
	}
}

// statusImpostor is one case of TestStatusImpostorCannotRemove: the answer at a's address
// names claimed as leader, with the certificate of cert. With claimed and cert "c", a member
// of b's configuration (as a member removed while b was down would be) names itself leader:
// b must not refuse to start on that one word, without a second member to confirm it. With
// cluster set, the answer names another cluster instead (--join's check): b must not refuse
// to start on the word of a certificate outside its configuration.
func statusImpostor(t *testing.T, claimed, certName, cluster string) {
	dir, _ := tlsDirs(t, "a", "b", "c", "evil")
	nodes := openTLSCluster(t, dir, "a", "b", "c")
	mustOffload(t, nodes[1], objects(1, 8<<10, keyOf("b", 0)))
	aPeer, cfg := nodes[0].PeerAddr(), nodes[1].cfg
	for _, nd := range nodes {
		mustClose(t, nd)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, certName+".crt"), filepath.Join(dir, certName+".key"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", aPeer)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})))
	pb.RegisterClusterServer(srv, fakeStatus{resp: &pb.StatusResponse{LeaderId: claimed, ClusterId: cluster,
		Members: []*pb.Member{{NodeId: claimed, PeerAddr: aPeer, Leader: true}}}})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), removedGrace+3*time.Second) // past one clusterLists
	defer cancel()
	n, err := Open(ctx, cfg)
	if n != nil {
		_ = n.Close()
	}
	if errors.Is(err, ErrRemoved) || errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("member b refused to start on the word of certificate %s answering at a's address (leader %q, cluster %q): %v", certName, claimed, cluster, err)
	}
	t.Logf("restart of b with no member up: %v", err)
}

// fakeStatus answers Cluster/Status with resp.
type fakeStatus struct {
	pb.UnimplementedClusterServer
	resp *pb.StatusResponse
}

func (f fakeStatus) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return f.resp, nil
}
