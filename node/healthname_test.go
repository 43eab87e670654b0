package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The gRPC health service answers the client API's service name (and, with a local
// socket, the local service's) with the status it gives "": a probe that names the service
// it calls sees a ready node SERVING and a node that stopped serving NOT_SERVING.
func TestHealthAnswersServiceNames(t *testing.T) {
	dir, err := os.MkdirTemp("", "kvh") // a short path: sun_path holds 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cfg := testConfig(t.TempDir())
	cfg.APIAddr = freeAddr(t)
	cfg.Local.Socket = filepath.Join(dir, "local.sock")
	n := mustOpen(t, cfg)
	defer n.Close()
	conn, err := grpc.NewClient(n.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	check := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, name := range []string{"", "kvoffload.v1.KVOffload", "kvoffload.v1.LocalKVOffload"} {
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
			if err != nil || r.Status != want {
				t.Errorf("Check(%q): %v %v, want %v", name, r, err, want)
			}
		}
	}
	check(healthpb.HealthCheckResponse_SERVING)
	n.notServing()
	check(healthpb.HealthCheckResponse_NOT_SERVING)
}
