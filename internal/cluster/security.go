package cluster

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/kvoffload/kvoffload/internal/devca"
	"github.com/kvoffload/kvoffload/raftmeta"
)

// tlsMaterial is the loaded certificates.
type tlsMaterial struct {
	cert tls.Certificate
	ca   *x509.CertPool
}

// loadTLS loads node id's certificate and key and the cluster CA; nil without any of them.
func loadTLS(cfg Config) (*tlsMaterial, error) {
	if cfg.CertFile == "" && cfg.KeyFile == "" && cfg.CAFile == "" {
		return nil, nil
	}
	id := cfg.ID
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("node: loading the node certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("node: parsing %s: %w", cfg.CertFile, err)
	}
	if leaf.Subject.CommonName != id {
		return nil, fmt.Errorf("node: the certificate in %s is for %q, not this node's ID %q (its Common Name is the node's identity)", cfg.CertFile, leaf.Subject.CommonName, id)
	}
	pool, err := devca.CAPool(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return &tlsMaterial{cert: cert, ca: pool}, nil
}

// peerServer requires and verifies a client certificate of the cluster CA.
func (m *tlsMaterial) peerServer() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{m.cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: m.ca}
}

// apiServer presents the node certificate and asks clients for none.
func (m *tlsMaterial) apiServer() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{m.cert}}
}

// peerClient presents this node's certificate and verifies the server's chain against the
// cluster CA. Members are dialed by address (often an IP, a proxy, a NAT), so host-name
// verification is replaced by chain verification in VerifyConnection (the pattern of
// crypto/tls's own ExampleConfig_verifyConnection). When member is not empty the answering
// certificate must also be that member's: a node certificate (no OperatorUnit) whose Common
// Name is member; addr, the address dialed, is for the refusal's message. Otherwise any
// holder of a cluster certificate who answered at a member's address (a removed member,
// until the CA is rotated) would be taken for it: its refusal for the leader's (the removal
// signal) and its answer for the owner's. member is empty for
// Join and Leave, which follow redirects by address, and for the Raft transport, whose
// dialing side checks the answering certificate against the Raft configuration itself
// (raftmeta's streamLayer.checkServer) and whose listener admits only members (raft below).
func (m *tlsMaterial) peerClient(member, addr string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{m.cert},
		InsecureSkipVerify: true, // replaced by VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("node: the peer presented no certificate")
			}
			opts := x509.VerifyOptions{Roots: m.ca, Intermediates: x509.NewCertPool(),
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return err
			}
			leaf := cs.PeerCertificates[0]
			switch {
			case member == "":
			case slices.Contains(leaf.Subject.OrganizationalUnit, devca.OperatorUnit):
				return fmt.Errorf("node: dialing member %s at %s, the peer presented operator %s's certificate", member, addr, leaf.Subject.CommonName)
			case leaf.Subject.CommonName != member:
				return fmt.Errorf("node: dialing member %s at %s, the peer presented member %s's certificate", member, addr, leaf.Subject.CommonName)
			}
			return nil
		}}
}

// raft is the Raft transport's TLS. Its listener admits only node certificates (no operator)
// whose Common Name admit accepts, at the handshake and again each time the connection sends
// (raftmeta.TLS.Admit): Raft messages carry their sender's ID unauthenticated, so the
// connection itself must come from a member, and stop when it no longer is: otherwise an
// operator certificate can send AppendEntries as the leader, and a removed member can, over a
// connection it opened while a member (TestTLSCluster, TestRemovedMemberLosesRaftConnections).
func (m *tlsMaterial) raft(admit func(id string) error) *raftmeta.TLS {
	if m == nil {
		return nil
	}
	srv := m.peerServer()
	srv.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return errors.New("node: raft: the peer presented no verified certificate")
		}
		leaf := cs.VerifiedChains[0][0]
		if slices.Contains(leaf.Subject.OrganizationalUnit, devca.OperatorUnit) {
			return fmt.Errorf("node: raft: operator certificate %q refused on the Raft port", leaf.Subject.CommonName)
		}
		return admit(leaf.Subject.CommonName)
	}
	return &raftmeta.TLS{Server: srv, Client: m.peerClient("", ""), Admit: admit}
}

// identity is who called a peer RPC, from its verified certificate.
type identity struct {
	name     string // the certificate's Common Name: a node ID, or an operator's name
	operator bool   // devca.OperatorUnit is among the certificate's Organizational Units
}

// String names the caller in logs and refusals.
func (id identity) String() string {
	switch {
	case id.name == "":
		return "an unauthenticated peer"
	case id.operator:
		return "operator " + id.name
	}
	return "node " + id.name
}

// callerOf returns the verified identity of ctx's peer; the zero identity without TLS.
func callerOf(ctx context.Context) identity {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return identity{}
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return identity{}
	}
	leaf := ti.State.VerifiedChains[0][0]
	return identity{name: leaf.Subject.CommonName, operator: slices.Contains(leaf.Subject.OrganizationalUnit, devca.OperatorUnit)}
}

// TokenCheck returns the server options that refuse client API calls without one of tokens:
// a tap handle, which refuses a stream on its headers before any of its message is read (gRPC
// reads a unary request whole before an interceptor runs, so without it a caller without a
// token could make the node buffer messages of up to the message limit), and interceptors
// that check again. The comparison takes the same time whatever the token's content
// (crypto/subtle).
func TokenCheck(tokens []string) []grpc.ServerOption {
	check := func(md metadata.MD, method string) error {
		if strings.HasPrefix(method, "/grpc.health.") || strings.HasPrefix(method, "/grpc.reflection.") {
			return nil
		}
		for _, v := range md.Get("authorization") {
			// The scheme is case-insensitive (RFC 7235 §2.1, which RFC 6750 §2.1 uses).
			const scheme = "bearer "
			if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
				continue
			}
			got := v[len(scheme):]
			for _, t := range tokens {
				if subtle.ConstantTimeCompare([]byte(got), []byte(t)) == 1 {
					return nil
				}
			}
		}
		return status.Error(codes.Unauthenticated, "this node's client API needs a bearer token (authorization: Bearer <token>)")
	}
	early := func(ctx context.Context, info *tap.Info) (context.Context, error) {
		return ctx, check(info.Header, info.FullMethodName)
	}
	unary, stream := guard(func(ctx context.Context, method string) error {
		md, _ := metadata.FromIncomingContext(ctx)
		return check(md, method)
	})
	return []grpc.ServerOption{grpc.InTapHandle(early), grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream)}
}

// guard returns server interceptors that run check on every call (its context and full
// method name) and refuse the call with check's error.
func guard(check func(ctx context.Context, method string) error) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	}
	return unary, stream
}
