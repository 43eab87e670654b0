package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/devca"
)

// peerCalls calls every Cluster RPC once on conn and returns each one's error.
func peerCalls(ctx context.Context, conn *grpc.ClientConn, id string) map[string]error {
	cl := pb.NewClusterClient(conn)
	out := map[string]error{}
	_, out["Join"] = cl.Join(ctx, &pb.JoinRequest{NodeId: "intruder", RaftAddr: "127.0.0.1:1", ApiAddr: "127.0.0.1:1", PeerAddr: "127.0.0.1:1"})
	_, out["Leave"] = cl.Leave(ctx, &pb.LeaveRequest{NodeId: id})
	_, out["Status"] = cl.Status(ctx, &pb.StatusRequest{})
	commit := fsm.EncodeCommit(fsm.Commit{TxnID: kvoffload.NewTxnID(), Node: id, Entries: []fsm.Entry{{Key: "forged", Size: 1, Gen: 1,
		Extent: fsm.Extent{Bucket: 1, Offset: 0, Length: 4096}}}})
	_, out["Propose"] = cl.Propose(ctx, &pb.ProposeRequest{Command: commit})
	_, out["Barrier"] = cl.Barrier(ctx, &pb.BarrierRequest{})
	_, out["ReadIndex"] = cl.ReadIndex(ctx, &pb.ReadIndexRequest{NodeId: id})
	st, err := cl.ReadLocal(ctx, &pb.GetRequest{Keys: []string{"k"}})
	if err == nil {
		_, err = st.Recv()
	}
	out["ReadLocal"] = err
	return out
}

// TestPeerServiceNotOnAPIPort: a client on the API port reaches no peer RPC (Unimplemented),
// and the peer port serves them.
func TestPeerServiceNotOnAPIPort(t *testing.T) {
	nodes := openCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(nodes[0].APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for rpc, err := range peerCalls(ctx, conn, nodes[0].cfg.ID) {
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("Cluster/%s on the API port: %v, want Unimplemented", rpc, err)
		}
	}
	if _, err := pb.NewKVOffloadClient(conn).Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Errorf("KVOffload/Status on the API port: %v", err)
	}
	peer, err := grpc.NewClient(nodes[0].PeerAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if _, err := pb.NewClusterClient(peer).Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Errorf("Cluster/Status on the peer port: %v", err)
	}
}

// tlsDirs makes a cluster CA with certificates for ids and the operator "ops", and a second,
// foreign CA with a certificate for "a" (same ID, other cluster).
func tlsDirs(t *testing.T, ids ...string) (dir, foreign string) {
	t.Helper()
	dir, foreign = filepath.Join(t.TempDir(), "ca"), filepath.Join(t.TempDir(), "foreign")
	if err := devca.Make(devca.Options{Dir: dir, Nodes: ids, Operators: []string{"ops"}, Hosts: []string{"127.0.0.1"}, Valid: time.Hour}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := devca.Make(devca.Options{Dir: foreign, Nodes: []string{"a"}, Hosts: []string{"127.0.0.1"}, Valid: time.Hour}, io.Discard); err != nil {
		t.Fatal(err)
	}
	return dir, foreign
}

func tlsSecurity(dir, id string) Security {
	return Security{CertFile: filepath.Join(dir, id+".crt"), KeyFile: filepath.Join(dir, id+".key"), CAFile: filepath.Join(dir, "ca.crt")}
}

// dialAs connects to addr presenting the certificate name from dir (none when name is ""),
// trusting the CA in trustDir.
func dialAs(t *testing.T, addr, dir, name, trustDir string) *grpc.ClientConn {
	t.Helper()
	cfg, err := devca.ClientConfig(trustDir, dir, name, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestTLSCluster: with TLS on, members join, replicate and forward commits over mutual TLS;
// a peer without a certificate of the cluster CA cannot join, propose or read; one with
// another node's certificate cannot join as someone else, remove another node or ask a read
// index in its name; an operator's certificate may remove a member.
func TestTLSCluster(t *testing.T) {
	dir, foreign := tlsDirs(t, "a", "b", "c")
	nodes := openTLSCluster(t, dir, "a", "b", "c")
	leader := leaderOf(t, nodes...)
	var follower *Node
	for _, nd := range nodes {
		if nd != leader {
			follower = nd
		}
	}
	keys := []string{keyOf("tls", 0), keyOf("tls", 1)}
	mustOffload(t, follower, objects(7, 8<<10, keys...)) // a forwarded COMMIT over mTLS
	for _, nd := range nodes {
		waitApplied(t, nd, follower)
		checkReadable(t, nd, 7, 8<<10, keys...)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, conn := range map[string]*grpc.ClientConn{
		"no certificate":         dialAs(t, leader.PeerAddr(), "", "", dir),
		"another cluster's cert": dialAs(t, leader.PeerAddr(), foreign, "a", dir),
	} {
		for rpc, err := range peerCalls(ctx, conn, follower.cfg.ID) {
			if status.Code(err) != codes.Unavailable {
				t.Errorf("%s: Cluster/%s: %v, want Unavailable (TLS handshake refused)", name, rpc, err)
			}
		}
	}
	other := dialAs(t, leader.PeerAddr(), dir, follower.cfg.ID, dir) // a member's own certificate
	cl := pb.NewClusterClient(other)
	if _, err := cl.Join(ctx, &pb.JoinRequest{NodeId: "z", RaftAddr: "127.0.0.1:1", ApiAddr: "127.0.0.1:1", PeerAddr: "127.0.0.1:1"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("join of z with %s's certificate: %v, want PermissionDenied", follower.cfg.ID, err)
	}
	if _, err := cl.Leave(ctx, &pb.LeaveRequest{NodeId: leader.cfg.ID}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("leave of %s with %s's certificate: %v, want PermissionDenied", leader.cfg.ID, follower.cfg.ID, err)
	}
	if _, err := cl.ReadIndex(ctx, &pb.ReadIndexRequest{NodeId: leader.cfg.ID}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("read index in %s's name with %s's certificate: %v, want PermissionDenied", leader.cfg.ID, follower.cfg.ID, err)
	}
	forged := fsm.EncodeCommit(fsm.Commit{TxnID: kvoffload.NewTxnID(), Node: leader.cfg.ID, Entries: []fsm.Entry{{Key: "forged", Size: 1, Gen: 1,
		Extent: fsm.Extent{Bucket: 1, Offset: 0, Length: 4096}}}})
	if _, err := cl.Propose(ctx, &pb.ProposeRequest{Command: forged}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a COMMIT in %s's name with %s's certificate: %v, want PermissionDenied", leader.cfg.ID, follower.cfg.ID, err)
	}
	member := fsm.EncodeSetMember(fsm.SetMember{TxnID: kvoffload.NewTxnID(), Member: fsm.Member{NodeID: "z", RaftAddr: "127.0.0.1:1"}})
	if _, err := cl.Propose(ctx, &pb.ProposeRequest{Command: member}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a forwarded Member command: %v, want PermissionDenied", err)
	}
	if _, ok := leader.fsm.Lookup("forged"); ok {
		t.Error("the forged COMMIT's key is in the metadata")
	}
	if n := len(mustServers(t, leader)); n != 3 {
		t.Fatalf("the leader's configuration has %d servers after the refused calls, want 3", n)
	}
	// A call to a known member (the leader, a key's owner) accepts only that member's
	// certificate: another member answering at its address is refused in the handshake.
	var third *Node
	for _, nd := range nodes {
		if nd != leader && nd != follower {
			third = nd
		}
	}
	if lc, err := follower.peers.Member(leader.cfg.ID, leader.PeerAddr()); err != nil {
		t.Fatal(err)
	} else if _, err := lc.Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Errorf("Status of leader %s at its own address: %v", leader.cfg.ID, err)
	}
	if wc, err := follower.peers.Member(leader.cfg.ID, third.PeerAddr()); err != nil {
		t.Fatal(err)
	} else if _, err := wc.Status(ctx, &pb.StatusRequest{}); status.Code(err) != codes.Unavailable ||
		!strings.Contains(err.Error(), fmt.Sprintf("dialing member %s at %s, the peer presented member %s's certificate", leader.cfg.ID, third.PeerAddr(), third.cfg.ID)) {
		t.Errorf("Status of leader %s answered by %s's certificate: %v, want Unavailable naming %s's certificate",
			leader.cfg.ID, third.cfg.ID, err, third.cfg.ID)
	}
	ops := pb.NewClusterClient(dialAs(t, leader.PeerAddr(), dir, "ops", dir))
	remove := fsm.EncodeRemove(fsm.Remove{TxnID: kvoffload.NewTxnID(), Keys: []fsm.KeyGen{{Key: keys[0], Gen: 1}}})
	if _, err := ops.Propose(ctx, &pb.ProposeRequest{Command: remove}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a REMOVE with the operator's certificate: %v, want PermissionDenied", err)
	}
	if st, err := ops.ReadLocal(ctx, &pb.GetRequest{Keys: keys}); err == nil {
		if _, err = st.Recv(); status.Code(err) != codes.PermissionDenied {
			t.Errorf("ReadLocal with the operator's certificate: %v, want PermissionDenied", err)
		}
	}
	if err := raftHandshake(t, leader.cfg.RaftAddr, dir, "ops"); err == nil {
		t.Error("the Raft port accepted the operator's certificate")
	}
	if err := raftHandshake(t, leader.cfg.RaftAddr, dir, follower.cfg.ID); err != nil {
		t.Errorf("the Raft port refused member %s: %v", follower.cfg.ID, err)
	}
	if _, err := ops.Barrier(ctx, &pb.BarrierRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a Barrier with the operator's certificate: %v, want PermissionDenied", err)
	}
	if _, err := cl.Barrier(ctx, &pb.BarrierRequest{}); err != nil {
		t.Errorf("a Barrier with member %s's certificate: %v", follower.cfg.ID, err)
	}
	abort := func(reason string) error {
		cmd := fsm.EncodeAbort(fsm.Abort{TxnID: kvoffload.NewTxnID(), Node: follower.cfg.ID, Reason: reason})
		_, err := cl.Propose(ctx, &pb.ProposeRequest{Command: cmd})
		return err
	}
	if err := abort(strings.Repeat("r", fsm.MaxAbortReason+1)); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), strconv.Itoa(fsm.MaxAbortReason)) {
		t.Errorf("an ABORT with a reason of %d bytes: %v, want InvalidArgument naming the limit", fsm.MaxAbortReason+1, err)
	}
	if err := abort("member's own abort"); err != nil {
		t.Errorf("an ABORT in %s's own name: %v", follower.cfg.ID, err)
	}
	if _, err := ops.Leave(ctx, &pb.LeaveRequest{NodeId: follower.cfg.ID}); err != nil {
		t.Fatalf("leave of %s with the operator's certificate: %v", follower.cfg.ID, err)
	}
	if n := len(mustServers(t, leader)); n != 2 {
		t.Fatalf("the leader's configuration has %d servers after the operator's Leave, want 2", n)
	}
	// A removed member's certificate is still valid: its ABORTs and Barriers, which would
	// grow every replica's Raft log, are refused like its COMMITs.
	if err := abort("after removal"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("an ABORT from removed member %s: %v, want PermissionDenied", follower.cfg.ID, err)
	}
	if _, err := cl.Barrier(ctx, &pb.BarrierRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a Barrier from removed member %s: %v, want PermissionDenied", follower.cfg.ID, err)
	}
}

// openTLSCluster opens a cluster of ids with the certificates in dir (tlsDirs), each node
// joining through the one opened before it (the third through a follower: redirected), closed
// at the end of the test.
func openTLSCluster(t *testing.T, dir string, ids ...string) []*Node {
	t.Helper()
	base := t.TempDir()
	var nodes []*Node
	t.Cleanup(func() {
		for _, nd := range nodes {
			_ = nd.Close()
		}
	})
	for _, id := range ids {
		cfg := testConfig(filepath.Join(base, id))
		cfg.ID, cfg.Txn.NodeID = id, id
		cfg.RaftAddr, cfg.APIAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
		cfg.Security = tlsSecurity(dir, id)
		if len(nodes) > 0 {
			cfg.Join = []string{nodes[len(nodes)-1].PeerAddr()}
		}
		nodes = append(nodes, mustOpen(t, cfg))
	}
	return nodes
}

// raftHandshake completes a TLS handshake on a Raft port with dir/name's certificate and
// returns the server's verdict (TLS 1.3 reports a refused client certificate on first read).
func raftHandshake(t *testing.T, addr, dir, name string) error {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
		return nil // the server kept the connection: admitted, waiting for a Raft RPC
	}
	return err
}

func mustServers(t *testing.T, n *Node) []string {
	t.Helper()
	svs, err := n.raft.Servers()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range svs {
		ids = append(ids, s.ID)
	}
	return ids
}

// TestPlaintextOffLoopbackRefused: a peer or Raft listener off loopback without TLS is a
// configuration error unless Insecure is set; with TLS it is fine.
func TestPlaintextOffLoopbackRefused(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RaftAddr, cfg.APIAddr, cfg.PeerAddr = "127.0.0.1:7000", "0.0.0.0:7100", "0.0.0.0:7300"
	if err := cfg.Validate(); err == nil {
		t.Fatal("a plaintext peer listener on 0.0.0.0 validated")
	}
	cfg.Security.Insecure = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("with Insecure: %v", err)
	}
	cfg.Security = Security{CertFile: "x.crt", KeyFile: "x.key", CAFile: "ca.crt"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("with TLS files: %v", err)
	}
	cfg.Security = Security{CertFile: "x.crt"}
	if err := cfg.Validate(); err == nil {
		t.Fatal("a partial TLS setup validated")
	}
}

// TestIdlePeerConnectionClosed: a connection to the peer port that never starts its TLS
// handshake is closed after the handshake timeout (5 s), not gRPC's default 120 s, so such
// connections cannot pile up and take the process's descriptors.
func TestIdlePeerConnectionClosed(t *testing.T) {
	dir, _ := tlsDirs(t, "a")
	n := openTLSCluster(t, dir, "a")[0]
	conn, err := net.Dial("tcp", n.PeerAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(30 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	if took := time.Since(start); err == nil || took > 15*time.Second {
		t.Fatalf("an idle connection to the peer port: read %v after %v, want it closed within the 5 s handshake timeout", err, took)
	}
}
