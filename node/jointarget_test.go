package node

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// openJoining opens a fresh member that joins through join, within limit, and returns Open's
// error and how long it took.
func openJoining(t *testing.T, limit time.Duration, join ...string) (error, time.Duration) {
	t.Helper()
	cfg := memberConfig(t, filepath.Join(t.TempDir(), "j"), "j", join...)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	n, err := Open(ctx, cfg)
	if err == nil {
		_ = n.Close()
		t.Fatalf("joined through %v", join)
	}
	return err, time.Since(start)
}

// TestJoinWrongTargetFails: --join at an address that is not a member's peer service fails
// within joinAnswerWait, saying what answered there, instead of retrying until the process is
// stopped; an address without a port is refused before anything starts (gRPC would dial port
// 443).
func TestJoinWrongTargetFails(t *testing.T) {
	nodes := openCluster(t, 1)
	web, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = http.Serve(web, http.NotFoundHandler()) }()
	t.Cleanup(func() { web.Close() })
	for _, tc := range []struct{ name, addr, says string }{
		{"http", web.Addr().String(), "an HTTP server answers there"},
		{"raft", nodes[0].cfg.RaftAddr, "--raft-addr?"},
		{"nothing", freeAddr(t), "nothing listens there"},
		{"unknown host", "no-such-host.invalid:7300", "the host does not resolve"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err, took := openJoining(t, joinAnswerWait+20*time.Second, tc.addr)
			if took > joinAnswerWait+5*time.Second {
				t.Errorf("the join gave up after %v, want about %v", took, joinAnswerWait)
			}
			for _, want := range []string{"--join", tc.addr, tc.says, "--peer-addr"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
	t.Run("no port", func(t *testing.T) {
		err, took := openJoining(t, 10*time.Second, "127.0.0.1")
		if took > time.Second || !strings.Contains(err.Error(), `--join "127.0.0.1" is not host:port`) {
			t.Errorf("after %v: %v; want an at-once refusal naming the address", took, err)
		}
	})
}

// unready is a peer service that is not ready: every Status and Join is Unavailable.
type unready struct{ pb.UnimplementedClusterServer }

func (unready) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return nil, status.Error(codes.Unavailable, "starting")
}

func (unready) Join(context.Context, *pb.JoinRequest) (*pb.JoinResponse, error) {
	return nil, status.Error(codes.Unavailable, "starting")
}

// TestJoinWaitsForAnUnreadyMember: a peer service that answers Unavailable is a member not
// ready yet, and the join keeps retrying past joinAnswerWait.
func TestJoinWaitsForAnUnreadyMember(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterClusterServer(srv, unready{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	err, _ = openJoining(t, joinAnswerWait+3*time.Second, lis.Addr().String())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the join ended with %v, want it still retrying at the deadline", err)
	}
}
