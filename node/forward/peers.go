package forward

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// Peers holds one gRPC connection per other member, by peer address, dialed on first use
// with the same options for every member.
type Peers struct {
	opts  []grpc.DialOption
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewPeers returns an empty set of connections that dials with opts: the node passes its
// transport credentials (mutual TLS or plaintext), keepalive, message-size limits and the
// interceptors that stamp its cluster ID on every call (node/cluster.go peerDialOptions).
func NewPeers(opts ...grpc.DialOption) *Peers {
	return &Peers{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

// Conn returns the connection to the member at peer address addr.
func (p *Peers) Conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, fmt.Errorf("node: dialing %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

// Client returns a client of the Cluster service of the member at peer address addr.
func (p *Peers) Client(addr string) (pb.ClusterClient, error) {
	c, err := p.Conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewClusterClient(c), nil
}

// Close closes every connection; a later call dials again.
func (p *Peers) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[string]*grpc.ClientConn{}
}
