package node

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// cutProxy forwards TCP connections to target until cut: then it closes them and refuses new
// ones (a one-way partition when it stands in front of a node's Raft listener), until heal.
// Once held (hold), it passes no more bytes from target back to the dialers, on any
// connection, old or new, and keeps the connections open: to the dialers the target is a
// stopped process (SIGSTOP) that takes requests and answers nothing, keepalive pings included.
type cutProxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
	held   chan struct{} // closed by hold
	once   sync.Once
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{lis: lis, target: target, held: make(chan struct{})}
	t.Cleanup(func() { lis.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *cutProxy) serve(c net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.mu.Unlock()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, heldReader{up, p.held})
	select {
	case <-p.held: // a stopped process closes nothing: c stays open until cut
	default:
		c.Close()
	}
}

// hold stops every reply from target, for good.
func (p *cutProxy) hold() { p.once.Do(func() { close(p.held) }) }

// heldReader reads r; once held is closed, it drops what r gives, until r fails.
type heldReader struct {
	r    io.Reader
	held <-chan struct{}
}

func (h heldReader) Read(b []byte) (int, error) {
	for {
		n, err := h.r.Read(b)
		select {
		case <-h.held:
			if err != nil {
				return 0, err
			}
		default:
			return n, err
		}
	}
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// TestExistsOnLaggingMember: a member the leader cannot replicate to (its Raft listener cut
// off) answers BatchExists for a key acknowledged through the leader after the cut, and for
// a key never written, Unknown with the reason, never Absent: it cannot confirm either
// (Mooncake #2827's shape). On the wire that is PRESENCE_UNKNOWN with the reason.
// Healed, it answers Present.
func TestExistsOnLaggingMember(t *testing.T) {
	base := t.TempDir()
	var nodes []*Node
	var proxy *cutProxy
	for i := range 3 {
		cfg := testConfig(filepath.Join(base, string(rune('a'+i))))
		cfg.ID = string(rune('a' + i))
		cfg.Txn.NodeID = cfg.ID
		cfg.Txn.ReadIndexTimeout = 300 * time.Millisecond
		cfg.RaftAddr, cfg.APIAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
		if i == 2 {
			proxy = newCutProxy(t, cfg.RaftAddr)
			cfg.RaftAdvertise = proxy.lis.Addr().String()
		}
		if i > 0 {
			cfg.Join = []string{nodes[0].PeerAddr()}
		}
		nodes = append(nodes, mustOpen(t, cfg))
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			_ = nd.Close()
		}
	})
	lag := nodes[2]
	var leader *Node
	for _, nd := range nodes {
		if nd.Raft().IsLeader() {
			leader = nd
		}
	}
	if leader == nil || leader == lag {
		t.Fatalf("want a leader other than %s, got %v", lag.cfg.ID, leader)
	}
	old := keyOf("lag", 0)
	mustOffload(t, leader, objects(7, 4<<10, old))
	waitApplied(t, lag, leader)

	proxy.setCut(true)
	acked := keyOf("lag", 1)
	mustOffload(t, leader, objects(7, 4<<10, acked))
	never := keyOf("lag", 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ex := mustExists(lag.BatchExists(ctx, []string{old, acked, never}, 0))
	if ex.Keys[0] != kvoffload.Present || ex.Keys[1] != kvoffload.Unknown || ex.Keys[2] != kvoffload.Unknown || ex.PrefixPresent != 1 || ex.Reason == "" {
		t.Fatalf("lagging member: %+v, want Present Unknown Unknown, prefix 1, a reason", ex)
	}

	conn, err := grpc.NewClient(lag.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := pb.NewKVOffloadClient(conn).BatchExists(ctx, &pb.ExistsRequest{Keys: []string{acked, old}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Keys[0] != pb.Presence_PRESENCE_UNKNOWN || resp.Keys[1] != pb.Presence_PRESENCE_PRESENT || resp.PrefixPresent != 0 ||
		!strings.Contains(resp.Reason, "not confirmed") {
		t.Fatalf("lagging member on the wire: %v prefix %d reason %q", resp.Keys, resp.PrefixPresent, resp.Reason)
	}

	proxy.setCut(false)
	for {
		ex = mustExists(lag.BatchExists(ctx, []string{old, acked, never}, 0))
		if ex.Keys[1] == kvoffload.Present && ex.Keys[2] == kvoffload.Absent && ex.PrefixPresent == 2 {
			break
		}
		if ex.Keys[1] == kvoffload.Absent || ex.Keys[2] == kvoffload.Present {
			t.Fatalf("healed member: %+v", ex)
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("the healed member never caught up: %+v", ex)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
