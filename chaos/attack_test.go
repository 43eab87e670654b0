//go:build chaos

package chaos

import (
	"context"
	"io"
	"path/filepath"
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
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// The attack tier (docs/security.md): callers that send what they should not, against
// storenode processes started as the README starts them. Each attack is checked for its
// refusal, and afterwards every acknowledged key must read back its bytes through every node,
// and every node must restart from its own data.

// forgedCommit is a COMMIT in node's name for one key at ext.
func forgedCommit(node, key string, ext fsm.Extent, size uint32) []byte {
	return fsm.EncodeCommit(fsm.Commit{TxnID: kvoffload.NewTxnID(), Node: node,
		Entries: []fsm.Entry{{Key: key, Size: size, Gen: 1, Extent: ext}}})
}

// everyPeerRPC calls each Cluster RPC once through conn and returns the errors by name.
func everyPeerRPC(ctx context.Context, conn *grpc.ClientConn, victim string) map[string]error {
	cl := pb.NewClusterClient(conn)
	out := map[string]error{}
	_, out["Join"] = cl.Join(ctx, &pb.JoinRequest{NodeId: "fake", RaftAddr: "127.0.0.1:1", ApiAddr: "127.0.0.1:1", PeerAddr: "127.0.0.1:1"})
	_, out["Leave"] = cl.Leave(ctx, &pb.LeaveRequest{NodeId: victim})
	_, out["Propose"] = cl.Propose(ctx, &pb.ProposeRequest{Command: forgedCommit(victim, "forged", fsm.Extent{Bucket: 1, Length: 4096}, 1)})
	_, out["Barrier"] = cl.Barrier(ctx, &pb.BarrierRequest{})
	_, out["ReadIndex"] = cl.ReadIndex(ctx, &pb.ReadIndexRequest{NodeId: victim})
	st, err := cl.ReadLocal(ctx, &pb.GetRequest{Keys: []string{"k"}})
	if err == nil {
		_, err = st.Recv()
	}
	out["ReadLocal"] = err
	return out
}

func plainConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// tlsConn dials addr trusting caDir's CA, presenting certDir/name's certificate (none if "").
func tlsConn(t *testing.T, addr, caDir, certDir, name string) *grpc.ClientConn {
	t.Helper()
	cfg, err := devca.ClientConfig(caDir, certDir, name, "127.0.0.1")
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

// TestAttackTier: a TLS cluster of three storenode processes with acknowledged keys, then:
// every peer RPC on every API port (Unimplemented); every peer RPC on the leader's peer port
// without a certificate and with another CA's certificate (refused in the handshake); with a
// member's certificate, a COMMIT in another node's name, a Join as someone else, a Leave of
// another node (PermissionDenied); with a member's own certificate, COMMITs that a buggy or
// compromised member could send (misaligned, 16 TiB, over another key's bytes). Afterwards
// every acknowledged key reads back through every node, and every node restarts.
func TestAttackTier(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, foreign := filepath.Join(t.TempDir(), "ca"), filepath.Join(t.TempDir(), "foreign")
	if err := devca.Make(devca.Options{Dir: dir, Nodes: []string{"n1", "n2", "n3"}, Hosts: []string{"127.0.0.1"}, Valid: time.Hour}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := devca.Make(devca.Options{Dir: foreign, Nodes: []string{"n1"}, Hosts: []string{"127.0.0.1"}, Valid: time.Hour}, io.Discard); err != nil {
		t.Fatal(err)
	}
	c := startClusterWith(t, 3, "", func(p *proc) {
		p.extraArgs = append(p.extraArgs, "--tls-ca", filepath.Join(dir, "ca.crt"),
			"--tls-cert", filepath.Join(dir, p.id+".crt"), "--tls-key", filepath.Join(dir, p.id+".key"))
	})
	w := Workload{Seed: testkit.Seed(t), BlockSize: 64 << 10}
	keys := keysNamed("attack", 24)
	for i, p := range c.procs { // every node owns some keys
		cl := c.dial(ctx, p.api)
		mustOffloadVia(t, ctx, cl, w, keys[i*8:(i+1)*8])
		cl.Close()
	}
	leader := c.leader(ctx, c.procs[0])
	var member *proc
	for _, p := range c.procs {
		if p != leader {
			member = p
		}
	}

	for _, p := range c.procs {
		for rpc, err := range everyPeerRPC(ctx, plainConn(t, p.api), member.id) {
			if status.Code(err) != codes.Unimplemented {
				t.Errorf("Cluster/%s on %s's API port: %v, want Unimplemented", rpc, p.id, err)
			}
		}
	}
	for name, conn := range map[string]*grpc.ClientConn{
		"plaintext":              plainConn(t, leader.peer),
		"TLS without a cert":     tlsConn(t, leader.peer, dir, "", ""),
		"another cluster's cert": tlsConn(t, leader.peer, dir, foreign, "n1"),
	} {
		for rpc, err := range everyPeerRPC(ctx, conn, member.id) {
			if err == nil {
				t.Errorf("%s: Cluster/%s on the leader's peer port succeeded", name, rpc)
			}
		}
	}
	asMember := pb.NewClusterClient(tlsConn(t, leader.peer, dir, dir, member.id))
	refused := func(what string, err error) {
		t.Helper()
		if c := status.Code(err); c != codes.PermissionDenied && c != codes.InvalidArgument {
			t.Errorf("%s: %v, want PermissionDenied or InvalidArgument", what, err)
		}
	}
	_, err := asMember.Propose(ctx, &pb.ProposeRequest{Command: forgedCommit(leader.id, "forged-other", fsm.Extent{Bucket: 1, Length: 4096}, 1)})
	refused("a COMMIT in the leader's name with a member's certificate", err)
	_, err = asMember.Join(ctx, &pb.JoinRequest{NodeId: "fake", RaftAddr: "127.0.0.1:1", ApiAddr: "127.0.0.1:1", PeerAddr: "127.0.0.1:1"})
	refused("a Join as another node", err)
	_, err = asMember.Leave(ctx, &pb.LeaveRequest{NodeId: leader.id})
	refused("a Leave of another node", err)
	for name, ext := range map[string]fsm.Extent{
		"misaligned": {Bucket: 1, Offset: 1, Length: 4096},
		"16 TiB":     {Bucket: 1, Offset: 0, Length: 16 << 40},
	} {
		_, err := asMember.Propose(ctx, &pb.ProposeRequest{Command: forgedCommit(member.id, "forged-"+name, ext, 1)})
		refused("a "+name+" COMMIT in the member's own name", err)
	}
	// Over another key's bytes: the member's first record is at the start of one of its
	// first buckets; whatever the check answers, no acknowledged key may suffer.
	for b := uint32(0); b < 3; b++ {
		_, _ = asMember.Propose(ctx, &pb.ProposeRequest{Command: forgedCommit(member.id, "forged-overlap", fsm.Extent{Bucket: b, Length: 128 << 10}, 64<<10)})
	}

	check := func(when string) {
		t.Helper()
		for _, p := range c.procs {
			cl := c.dial(ctx, p.api)
			if ok, first := readAll(t, ctx, cl, w, keys); ok != len(keys) {
				t.Fatalf("%s: %d of %d acknowledged keys read back through %s (%s)", when, ok, len(keys), p.id, first)
			}
			totals.checks += len(keys)
			_, _ = cl.BatchGet(ctx, []string{"forged-overlap"}) // a read (and repair) of the forged key
			cl.Close()
		}
	}
	check("after the attacks")
	check("after reading the forged key")
	for _, p := range c.procs {
		c.kill(p)
		c.restart(p)
	}
	check("after every node restarted")
}
