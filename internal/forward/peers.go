package forward

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// Peers holds the gRPC connections to other members, dialed on first use: one per peer
// address for calls that follow an address (Join and Leave, redirected from member to
// member), and one per member and address for calls to a known member (the leader, a key's
// owner), whose connection accepts only that member's certificate.
type Peers struct {
	opts  []grpc.DialOption
	creds func(member, addr string) grpc.DialOption
	mu    sync.Mutex
	conns map[peerKey]*grpc.ClientConn
}

// peerKey names a connection: the address it dials and the member it must reach there ("":
// whoever holds a certificate of the cluster).
type peerKey struct{ addr, member string }

// NewPeers returns an empty set of connections. creds gives the transport credentials of a
// connection to member at addr (mutual TLS that checks the answering certificate is member's, or
// plaintext; member "" for a connection by address only); opts are every connection's other
// options: keepalive, message-size limits and the interceptors that stamp this node's cluster
// ID on every call (internal/cluster, peerDialOptions).
func NewPeers(creds func(member, addr string) grpc.DialOption, opts ...grpc.DialOption) *Peers {
	return &Peers{opts: opts, creds: creds, conns: map[peerKey]*grpc.ClientConn{}}
}

func (p *Peers) conn(k peerKey) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[k]; ok {
		return c, nil
	}
	c, err := p.dial(k.member, k.addr)
	if err != nil {
		return nil, err
	}
	p.conns[k] = c
	return c, nil
}

// dial makes a connection to member ("": whoever answers) at addr.
func (p *Peers) dial(member, addr string) (*grpc.ClientConn, error) {
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{p.creds(member, addr)}, p.opts...)...)
	if err != nil {
		return nil, fmt.Errorf("node: dialing %s: %w", addr, err)
	}
	return c, nil
}

// Client returns a client of the Cluster service of whichever member answers at peer address
// addr (Join and Leave, which follow redirects by address).
func (p *Peers) Client(addr string) (pb.ClusterClient, error) {
	c, err := p.conn(peerKey{addr: addr})
	if err != nil {
		return nil, err
	}
	return pb.NewClusterClient(c), nil
}

// Once returns a client of the Cluster service of member ("": whoever answers) at peer address
// addr over a connection of its own, which close closes: for an address a peer named (a
// join's redirect) and for start-up probes, which must not stay cached (and redialed) for the
// node's lifetime.
func (p *Peers) Once(member, addr string) (cl pb.ClusterClient, close func(), err error) {
	c, err := p.dial(member, addr)
	if err != nil {
		return nil, nil, err
	}
	return pb.NewClusterClient(c), func() { _ = c.Close() }, nil
}

// Member returns a client of the Cluster service of member id at peer address addr. With
// mutual TLS its calls fail (Unavailable, the handshake refused) unless the certificate that
// answers there is id's.
func (p *Peers) Member(id, addr string) (pb.ClusterClient, error) {
	c, err := p.conn(peerKey{addr: addr, member: id})
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
	p.conns = map[peerKey]*grpc.ClientConn{}
}
