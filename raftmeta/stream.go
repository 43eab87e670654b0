package raftmeta

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// tlsStreamLayer is a raft.StreamLayer over crypto/tls: every Raft connection, in both
// directions, is mutual TLS with certificates of the cluster CA (Config.TLS). A peer that
// presents no certificate, or one the CA did not sign, fails the handshake before raft reads
// a byte from it. It follows raft's own TCPStreamLayer (tcp_transport.go), with the listener
// wrapped by tls.NewListener and the dialer by tls.Dialer.
type tlsStreamLayer struct {
	net.Listener // tls.NewListener: the handshake runs on the first read, in raft's conn goroutine
	advertise    net.Addr
	dial         *tls.Config
}

// newTLSTransport listens on cfg.BindAddr and returns raft's NetworkTransport over
// tlsStreamLayer.
func newTLSTransport(cfg Config, advertise net.Addr, nt *raft.NetworkTransportConfig) (*raft.NetworkTransport, error) {
	ln, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("raftmeta: transport on %s: %w", cfg.BindAddr, err)
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	if ip := advertise.(*net.TCPAddr).IP; ip == nil || ip.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raftmeta: transport on %s: the advertised address %s is not dialable", cfg.BindAddr, advertise)
	}
	nt.Stream = &tlsStreamLayer{Listener: tls.NewListener(ln, cfg.TLS.Server), advertise: advertise, dial: cfg.TLS.Client}
	return raft.NewNetworkTransportWithConfig(nt), nil
}

// Addr is the advertised address (raft records it in configurations).
func (s *tlsStreamLayer) Addr() net.Addr { return s.advertise }

// Dial opens a TLS connection to address and completes the handshake within timeout, so a
// peer outside the cluster CA is refused here and not on raft's first RPC.
func (s *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.dial}
	return d.Dial("tcp", string(address))
}

// TLS is the mutual-TLS material of the Raft transport: Server for the listener (it must
// require and verify client certificates), Client for dialing (it must verify the server
// against the cluster CA and present this node's certificate).
type TLS struct {
	Server *tls.Config
	Client *tls.Config
}
