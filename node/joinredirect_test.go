package node

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// TestJoinRedirectsAreBounded: a peer with a cluster certificate at a joining node's --join
// address redirects every Join to "the leader" at a new spelling of its own address (more
// leading zeros in the port each time). The node follows at most maxRedirects per attempt,
// each over a connection it closes, so the connections open at the peer stay few: following
// every redirect and caching a connection per spelling makes thousands of live connections
// in seconds.
func TestJoinRedirectsAreBounded(t *testing.T) {
	dir, _ := tlsDirs(t, "d", "evil")
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "evil.crt"), filepath.Join(dir, "evil.key"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &liveListener{Listener: raw}
	_, port, _ := net.SplitHostPort(raw.Addr().String())
	r := &redirector{port: port}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})))
	pb.RegisterClusterServer(srv, r)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	cfg := testConfig(t.TempDir())
	cfg.ID, cfg.Txn.NodeID = "d", "d"
	cfg.RaftAddr, cfg.APIAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	cfg.Security = tlsSecurity(dir, "d")
	cfg.Join = []string{raw.Addr().String()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			peak.Store(max(peak.Load(), ln.live.Load()))
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	n, err := Open(ctx, cfg)
	close(stop)
	wg.Wait()
	if n != nil {
		_ = n.Close()
		t.Fatal("the node joined through a peer that only redirects")
	}
	t.Logf("%d Join calls in 5 s, at most %d connections open at once at the peer: %v", r.n.Load(), peak.Load(), err)
	if p := peak.Load(); p > maxRedirects+2 {
		t.Errorf("%d connections open at once at the redirecting peer, want at most %d (the --join address's and the redirects' of one attempt, closed)", p, maxRedirects+2)
	}
}

// redirector answers Status with a cluster ID and every Join with a redirect to its own port
// spelled with one more leading zero.
type redirector struct {
	pb.UnimplementedClusterServer
	port string
	n    atomic.Int64
}

func (r *redirector) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return &pb.StatusResponse{ClusterId: "kv-000000000000000000000001"}, nil
}

func (r *redirector) Join(ctx context.Context, _ *pb.JoinRequest) (*pb.JoinResponse, error) {
	k := r.n.Add(1)
	_ = grpc.SetTrailer(ctx, metadata.Pairs(leaderTrailer, "127.0.0.1:"+strings.Repeat("0", int(k))+r.port))
	return nil, status.Error(codes.FailedPrecondition, "not the leader")
}

// liveListener counts the connections it accepted that are not closed yet.
type liveListener struct {
	net.Listener
	live atomic.Int64
}

func (l *liveListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.live.Add(1)
	return &liveConn{Conn: c, l: l}, nil
}

type liveConn struct {
	net.Conn
	l    *liveListener
	once sync.Once
}

func (c *liveConn) Close() error {
	c.once.Do(func() { c.l.live.Add(-1) })
	return c.Conn.Close()
}
