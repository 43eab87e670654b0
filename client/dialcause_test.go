package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
)

// A member that cannot be connected is reported with what answered at its address, not a
// bare "connection failed": nothing listening, a host that does not resolve, an HTTP server
// (a member's --http-addr), a TLS server dialed without TLS.
func TestDialNamesWhatAnswered(t *testing.T) {
	web, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = http.Serve(web, http.NotFoundHandler()) }()
	t.Cleanup(func() { web.Close() })
	cert, _ := selfSigned(t)
	tlsNode := mustStartNode(t, newFake(), grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	for _, tc := range []struct{ name, addr, says string }{
		{"nothing", deadAddr(t), "nothing listens there"},
		{"unknown host", "no-such-host.invalid:7100", "the host does not resolve"},
		{"http", web.Addr().String(), "an HTTP server answers there"},
		{"tls", tlsNode.addr, "it expects TLS (give --tls-ca)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := client.DefaultOptions()
			opt.DialTimeout = 3 * time.Second
			_, err := client.DialOptions(context.Background(), opt, tc.addr)
			if !errors.Is(err, client.ErrUnreachable) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Dial %s: %v, want ErrUnreachable saying %q", tc.addr, err, tc.says)
			}
		})
	}
}

// An address without a port is refused at once, naming it, instead of dialing port 443.
func TestDialRefusesAnAddressWithoutPort(t *testing.T) {
	_, err := client.Dial(context.Background(), "127.0.0.1")
	if !errors.Is(err, kvoffload.ErrInvalidArgument) || !strings.Contains(err.Error(), `"127.0.0.1" is not host:port`) {
		t.Fatalf("Dial 127.0.0.1: %v, want ErrInvalidArgument naming the address", err)
	}
}
