package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/internal/devca"
	"github.com/kvoffload/kvoffload/internal/transport"
)

// An operator's calls to the peer service, for tools (storenode members remove).

// OperatorTLS is node.OperatorTLS: an operator's TLS configuration for the peer service.
func OperatorTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the certificate: %w", err)
	}
	pool, err := devca.CAPool(caFile)
	if err != nil {
		return nil, err
	}
	return (&tlsMaterial{cert: cert, ca: pool}).peerClient("", ""), nil
}

// Leave is node.RemoveMember: it removes node id from the cluster through the member at
// peer address addr (over TLS with tlsConfig, plaintext when it is nil), follows redirects to
// the leader at most MaxRedirects times, and retries while a member knows no leader. It
// returns the peer address of the member that answered and the keys it dropped.
func Leave(ctx context.Context, addr, id string, tlsConfig *tls.Config) (at string, dropped uint64, err error) {
	creds := insecure.NewCredentials()
	if tlsConfig != nil {
		creds = credentials.NewTLS(tlsConfig)
	}
	visited := []string{addr}
	for {
		resp, to, err := leaveAt(ctx, addr, id, creds)
		switch {
		case err == nil:
			return addr, resp.KeysDropped, nil
		case to != "" && status.Code(err) == codes.FailedPrecondition:
			if slices.Contains(visited, to) || len(visited) > MaxRedirects {
				return "", 0, fmt.Errorf("%s redirects to the leader at %s, visited already (%v): %w", addr, to, visited, err)
			}
			addr, visited = to, append(visited, to)
			continue
		case status.Code(err) == codes.Unimplemented:
			return "", 0, fmt.Errorf("%s serves no peer service (a member's --api-addr?): give a member's --peer-addr: %w", addr, err)
		case status.Code(err) != codes.Unavailable:
			return "", 0, fmt.Errorf("%s: %w", addr, err)
		}
		select {
		case <-ctx.Done():
			return "", 0, fmt.Errorf("%s: %w (last answer: %w)", addr, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// leaveAt makes one Leave call for id at addr; to is the leader's peer address of a redirect.
func leaveAt(ctx context.Context, addr, id string, creds credentials.TransportCredentials) (*pb.LeaveResponse, string, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, "", fmt.Errorf("dialing %s: %w", addr, err)
	}
	defer conn.Close()
	var trailer metadata.MD
	var at peer.Peer
	resp, err := pb.NewClusterClient(conn).Leave(ctx, &pb.LeaveRequest{NodeId: id}, grpc.Trailer(&trailer), grpc.Peer(&at))
	if err != nil && at.Addr == nil {
		return nil, "", fmt.Errorf("no member's peer service answered (%s): %w", transport.WhatAnswered(ctx, addr, err), errUnanswered)
	}
	if to := trailer.Get(LeaderTrailer); len(to) == 1 {
		return resp, to[0], err
	}
	return resp, "", err
}

// errUnanswered marks a call that reached no gRPC server.
var errUnanswered = errors.New("give a member's --peer-addr")
