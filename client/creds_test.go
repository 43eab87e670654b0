package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
)

func TestValidateCredentials(t *testing.T) {
	cases := []struct {
		name string
		set  func(*client.Options)
		want string // "" valid
	}{
		{"plaintext", func(*client.Options) {}, ""},
		{"token over TLS", func(o *client.Options) { o.TLS, o.Token = &tls.Config{}, "abc.DEF-123_~+/==" }, ""},
		{"token in plaintext", func(o *client.Options) { o.Token = "abc" }, "plaintext"},
		{"token in plaintext on purpose", func(o *client.Options) { o.Token, o.InsecureToken = "abc", true }, ""},
		{"token with a space", func(o *client.Options) { o.TLS, o.Token = &tls.Config{}, "abc def" }, "b64token"},
		{"token with a newline", func(o *client.Options) { o.TLS, o.Token = &tls.Config{}, "abc\nx-evil: 1" }, "b64token"},
		{"token of padding only", func(o *client.Options) { o.TLS, o.Token = &tls.Config{}, "==" }, "b64token"},
		{"TLS 1.0", func(o *client.Options) { o.TLS = &tls.Config{MinVersion: tls.VersionTLS10} }, "TLS 1.2"},
		{"negative stall timeout", func(o *client.Options) { o.StallTimeout = -1 }, "StallTimeout"},
		{"zero fields take defaults", func(o *client.Options) { *o = client.Options{} }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := client.DefaultOptions()
			tc.set(&o)
			err := o.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

// authRecorder is a server interceptor pair that records each call's "authorization"
// metadata and refuses calls without the expected one (Unauthenticated).
type authRecorder struct {
	want string
	mu   sync.Mutex
	got  []string
}

func (a *authRecorder) check(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	v := strings.Join(md.Get("authorization"), ",")
	a.mu.Lock()
	a.got = append(a.got, v)
	a.mu.Unlock()
	if v != a.want {
		return status.Error(codes.Unauthenticated, "bad token")
	}
	return nil
}

func (a *authRecorder) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := a.check(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := a.check(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

// Every call carries "authorization: Bearer <token>"; a member that refuses the token is
// answered ErrDenied after one attempt.
func TestTokenSentWithEveryCall(t *testing.T) {
	f := newFake()
	auth := &authRecorder{want: "Bearer s3cret"}
	n := mustStartNode(t, f, auth.options()...)
	opt := testOptions()
	opt.Token, opt.InsecureToken = "s3cret", true
	c := mustDial(t, opt, n.addr)
	ctx := testCtx(t)
	if _, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.BatchGet(ctx, []string{"a"}); err != nil || got[0].Status != kvoffload.Found {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := c.BatchExists(ctx, []string{"a"}, 0); err != nil {
		t.Fatal(err)
	}
	auth.mu.Lock()
	for i, v := range auth.got {
		if v != "Bearer s3cret" {
			t.Errorf("call %d: authorization %q", i, v)
		}
	}
	auth.mu.Unlock()

	opt.Token = "wrong"
	w := mustDial(t, opt, n.addr)
	before, _ := f.calls()
	_, err := w.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "b", Value: []byte("y")}})
	if !errors.Is(err, kvoffload.ErrDenied) || status.Code(err) != codes.Unauthenticated || errors.Is(err, kvoffload.ErrIndeterminate) {
		t.Fatalf("wrong token: %v, want kvoffload.ErrDenied", err)
	}
	auth.mu.Lock()
	attempts := len(auth.got)
	auth.mu.Unlock()
	// 5: the first client's Precheck (answered Unimplemented by the fake, behind the
	// interceptor), BatchOffload, BatchGet and BatchExists, then the wrong token's Precheck.
	if after, _ := f.calls(); after != before || attempts != 5 {
		t.Fatalf("wrong token: %d calls reached the handler, %d reached the interceptor (want 0 and 5: no retry)", after-before, attempts)
	}
}

// With Options.TLS the client talks TLS (and sends its token without InsecureToken); a
// plaintext client cannot use a TLS member.
func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	f := newFake()
	auth := &authRecorder{want: "Bearer tok"}
	n := mustStartNode(t, f, append(auth.options(), grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))...)
	opt := testOptions()
	opt.TLS = &tls.Config{RootCAs: pool}
	opt.Token = "tok"
	c := mustDial(t, opt, n.addr)
	res, err := c.BatchOffload(testCtx(t), kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("x")}})
	if err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("%+v %v", res, err)
	}
	plain := testOptions()
	plain.DialTimeout = 500 * time.Millisecond
	if _, err := client.DialOptions(testCtx(t), plain, n.addr); !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("plaintext dial of a TLS member: %v, want ErrUnreachable", err)
	}
}

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kvoffload test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
