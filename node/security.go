package node

import (
	"errors"
	"fmt"
	"net"

	"github.com/kvoffload/kvoffload/internal/devca"
)

// Security configures who may talk to a node (docs/security.md). With CertFile, KeyFile and
// CAFile set, the peer listener and the Raft transport are mutual TLS: only holders of a
// certificate signed by the cluster CA get in, and a peer's identity is its certificate's
// Subject Common Name (a node ID), checked on Join, Leave, every forwarded COMMIT and ABORT,
// and ReadIndex. Without them the node serves plaintext and trusts the network: allowed only
// on loopback addresses unless Insecure is set.
type Security struct {
	// CertFile and KeyFile are this node's certificate and key (PEM); the certificate's
	// Common Name must be the node's ID. CAFile is the cluster CA's certificate (PEM). All
	// three or none.
	CertFile, KeyFile, CAFile string
	// APITLS serves the client API over TLS with the node's certificate (clients verify it
	// against the cluster CA; they need no certificate of their own).
	APITLS bool
	// APITokens, when not empty, are the bearer tokens the client API accepts (gRPC metadata
	// "authorization: Bearer <token>"); a call without one of them is Unauthenticated.
	// Health checks and reflection need no token.
	APITokens []string
	// Insecure allows peer and Raft listeners on non-loopback addresses without TLS.
	Insecure bool
}

// OperatorUnit is the Subject Organizational Unit of an operator's certificate: its holder may
// call Leave for any node. A node's certificate may Leave only for itself.
const OperatorUnit = devca.OperatorUnit

// tlsOn reports whether the node has TLS material.
func (s Security) tlsOn() bool { return s.CertFile != "" || s.KeyFile != "" || s.CAFile != "" }

// validate reports a partial TLS setup and plaintext peer listeners off loopback.
func (s Security) validate(c Config) []error {
	var errs []error
	if s.tlsOn() && (s.CertFile == "" || s.KeyFile == "" || s.CAFile == "") {
		errs = append(errs, errors.New("node: TLS needs CertFile, KeyFile and CAFile together"))
	}
	if s.APITLS && !s.tlsOn() {
		errs = append(errs, errors.New("node: APITLS needs CertFile, KeyFile and CAFile"))
	}
	if s.tlsOn() || s.Insecure {
		return errs
	}
	for _, a := range []struct{ name, addr string }{{"RaftAddr", c.RaftAddr}, {"PeerAddr", c.PeerAddr}} {
		if a.addr != "" && !loopback(a.addr) {
			errs = append(errs, fmt.Errorf("node: %s %s is not a loopback address and no TLS is configured: anyone who can reach it could join, propose metadata or read keys; set the TLS files (docs/security.md) or, on a network you trust, Insecure (--insecure)", a.name, a.addr))
		}
	}
	return errs
}

// loopback reports whether host:port names a loopback host (an IP or "localhost").
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
