package transport

import (
	"context"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// WhatAnswered describes what answered at addr (host:port), where a gRPC call failed with err
// without reaching a gRPC server, followed by the call's own words: nothing listening, a host
// that does not resolve, an HTTP/1 server, a server that closes the connection at once (a
// member's Raft port), one that waits for TLS, or one without TLS. The words matched are
// grpc-go's and Go's own (google.golang.org/grpc internal/transport http2_client.go, the
// crypto/tls record error); any other error is returned as its message.
func WhatAnswered(ctx context.Context, addr string, err error) string {
	msg := status.Convert(err).Message()
	var what string
	switch {
	case strings.Contains(msg, "name resolver error") || strings.Contains(msg, "no such host"):
		host, _, _ := net.SplitHostPort(addr)
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, lerr := net.DefaultResolver.LookupHost(ctx, host); lerr != nil {
			return "the host does not resolve: " + lerr.Error()
		}
		what = "the host resolves to no address gRPC can dial"
	case strings.Contains(msg, "connection refused"):
		what = "nothing listens there"
	case strings.Contains(msg, "HTTP/1.1"):
		what = "an HTTP server answers there (a member's --http-addr?)"
	case strings.Contains(msg, "does not look like a TLS handshake"):
		what = "a server without TLS answers there (a member without TLS, or its --api-addr or --http-addr?)"
	case strings.Contains(msg, "server preface: EOF"):
		what = "a server there closes a plaintext connection without a word: it expects TLS (give --tls-ca), or it is a member's --raft-addr"
	case strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF"):
		what = "a server there closes a gRPC connection at once (a member's --raft-addr?)"
	case status.Code(err) == codes.DeadlineExceeded:
		what = "nothing answered in time"
	default:
		return msg
	}
	return what + ": " + msg
}
