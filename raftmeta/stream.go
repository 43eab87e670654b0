package raftmeta

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/kvoffload/kvoffload/third_party/raft"
)

// streamLayer is the raft.StreamLayer of a TCP transport that is mutual TLS (Config.TLS), or
// checks the cluster ID on every connection (Config.ClusterID), or both. It follows raft's
// own TCPStreamLayer (tcp_transport.go): a listener and a dialer, here wrapped by
// tls.NewListener / tls.Dialer and by the cluster-ID handshake (handshake.go).
type streamLayer struct {
	net.Listener // tls.NewListener with TLS: the handshake runs on the first read
	advertise    net.Addr
	tls          *tls.Config           // dialing; nil: plain TCP
	admit        func(id string) error // TLS.Admit: re-checked on every read of an accepted connection
	policy       *ClusterPolicy
	raft         atomic.Pointer[raft.Raft] // set once raft is started: its configuration names who may answer a dial
}

// newStreamTransport listens on cfg.BindAddr and returns raft's NetworkTransport over
// streamLayer.
func newStreamTransport(cfg Config, advertise net.Addr, nt *raft.NetworkTransportConfig) (*raft.NetworkTransport, *streamLayer, error) {
	ln, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("raftmeta: transport on %s: %w", cfg.BindAddr, err)
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	if ip := advertise.(*net.TCPAddr).IP; ip == nil || ip.IsUnspecified() {
		ln.Close()
		return nil, nil, fmt.Errorf("raftmeta: transport on %s: the advertised address %s is not dialable", cfg.BindAddr, advertise)
	}
	s := &streamLayer{Listener: ln, advertise: advertise}
	if cfg.ClusterID != nil {
		s.policy = &ClusterPolicy{ID: cfg.ClusterID, Open: cfg.ClusterOpen}
	}
	if cfg.TLS != nil {
		s.Listener, s.tls, s.admit = tls.NewListener(ln, cfg.TLS.Server), cfg.TLS.Client, cfg.TLS.Admit
	}
	nt.Stream = s
	return raft.NewNetworkTransportWithConfig(nt), s, nil
}

// Accept returns the next connection: with TLS and an Admit, one whose sender is checked
// again each time it sends (admittedConn); with a cluster ID, one that checks the dialer's ID
// on its first read (so a slow or silent dialer does not hold up raft's accept loop).
func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return c, err
	}
	if tc, ok := c.(*tls.Conn); ok && s.admit != nil {
		c = &admittedConn{Conn: tc, admit: s.admit}
	}
	if s.policy == nil {
		return c, nil
	}
	return &acceptedConn{Conn: c, policy: s.policy}, nil
}

// admittedConn is an accepted TLS connection whose sender (its client certificate's Common
// Name, a server ID) must still be admitted each time it sends: raft keeps a connection
// open as long as its peer does, so a member removed from the configuration could otherwise
// go on sending AppendEntries, forged ones included, over a connection it opened while it
// was a member, and have a forged entry committed (node's
// TestRemovedMemberLosesRaftConnections).
type admittedConn struct {
	*tls.Conn
	admit func(id string) error
}

// Read reads, then refuses the bytes and closes the connection unless the sender is still
// admitted. The first read runs the TLS handshake.
func (a *admittedConn) Read(p []byte) (int, error) {
	n, err := a.Conn.Read(p)
	if n == 0 {
		return n, err
	}
	cs := a.Conn.ConnectionState()
	if len(cs.PeerCertificates) == 0 {
		_ = a.Conn.Close()
		return 0, fmt.Errorf("raftmeta: raft connection from %s: no client certificate", a.RemoteAddr())
	}
	if aerr := a.admit(cs.PeerCertificates[0].Subject.CommonName); aerr != nil {
		_ = a.Conn.Close()
		return 0, fmt.Errorf("raftmeta: raft connection from %s closed: %w", a.RemoteAddr(), aerr)
	}
	return n, err
}

// Addr is the advertised address (raft records it in configurations).
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to address and, within timeout, completes the TLS handshake (a peer outside
// the cluster CA, or not the server the Raft configuration lists at address, is refused here,
// not on raft's first RPC) and the cluster-ID handshake.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	nd := &net.Dialer{Timeout: timeout}
	var c net.Conn
	var err error
	if s.tls != nil {
		c, err = (&tls.Dialer{NetDialer: nd, Config: s.tls}).Dial("tcp", string(address))
		if err == nil {
			if err = s.checkServer(address, c.(*tls.Conn).ConnectionState()); err != nil {
				c.Close()
				return nil, err
			}
		}
	} else {
		c, err = nd.Dial("tcp", string(address))
	}
	if err != nil || s.policy == nil {
		return c, err
	}
	if err := dialHandshake(c, s.policy.ID(), string(address), timeout); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// checkServer accepts a TLS connection to address only from a server that the latest Raft
// configuration lists at that address: the answering certificate's Common Name must be that
// server's ID (a member's certificate names its node ID, as the listening side checks,
// internal/cluster/security.go). Raft's messages carry no proof of their sender, so without it any holder
// of a certificate of the cluster CA who answered at a voter's address (a removed member,
// until the CA is rotated) could grant votes and acknowledge entries in the voter's place,
// and a leader would commit with a quorum of one real voter (node's
// TestRaftDialChecksTheServer).
func (s *streamLayer) checkServer(address raft.ServerAddress, cs tls.ConnectionState) error {
	r := s.raft.Load()
	if r == nil {
		return fmt.Errorf("raftmeta: dialing %s before raft has started", address)
	}
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("raftmeta: dialing %s: no certificate answered", address)
	}
	name := cs.PeerCertificates[0].Subject.CommonName
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("raftmeta: dialing %s: reading the configuration: %w", address, err)
	}
	for _, sv := range f.Configuration().Servers {
		if sv.Address == address && string(sv.ID) == name {
			return nil
		}
	}
	return fmt.Errorf("raftmeta: dialing %s: the certificate that answered is %q's, and the Raft configuration lists no server %q at that address", address, name, name)
}

// TLS is the mutual-TLS material of the Raft transport: Server for the listener (it must
// require and verify client certificates), Client for dialing (it must verify the server
// against the cluster CA and present this node's certificate; the transport then checks that
// the answering certificate's Common Name is the server ID the Raft configuration lists at the
// dialed address, checkServer). Admit, when set, is called with the Common Name of an accepted
// connection's client certificate each time it sends (admittedConn): an error closes the
// connection, so a server removed from the configuration loses the connections it opened
// while it was a member.
type TLS struct {
	Server *tls.Config
	Client *tls.Config
	Admit  func(id string) error
}
