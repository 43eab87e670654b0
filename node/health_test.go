package node

import (
	"context"
	"strings"
	"syscall"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/failpoint"
)

// TestFailStopIsUnhealthy: after the WAL's write fails, the node fail-stops (an fsync error is
// never retried; nothing more is accepted until a restart); Healthy and Ready then report
// it, so /healthz and /readyz (503) let a liveness probe restart the process instead of
// keeping it as alive, and the gRPC health service answers NOT_SERVING. Status still answers,
// and says why the node refuses (client.ClusterStatus.Refusing), which `storenode status`
// prints.
func TestFailStopIsUnhealthy(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.APIAddr = "127.0.0.1:0" // served, so that it has a gRPC health service
	n := mustOpen(t, cfg)
	defer n.Close()
	if err := n.Healthy(); err != nil {
		t.Fatalf("healthy node: %v", err)
	}
	if err := n.Ready(); err != nil {
		t.Fatalf("ready node: %v", err)
	}
	ctx := context.Background()
	c, err := client.DialOptions(ctx, client.DefaultOptions(), n.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if st, err := c.Status(ctx); err != nil || st.Refusing != "" {
		t.Fatalf("Status of a serving node: %+v %v, want no Refusing", st, err)
	}
	failpoint.EnableFunc(failpoint.WALWriteBatch, 0, func() error { return syscall.EIO })
	t.Cleanup(func() { failpoint.Disable(failpoint.WALWriteBatch) })
	res, _ := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objects(1, 4096, "health/k"))
	if len(res) == 1 && res[0].Outcome.OK() {
		t.Fatalf("offload with a failing fdatasync: %s", res[0].Outcome)
	}
	if err := n.Healthy(); err == nil {
		t.Fatal("Healthy is nil after a failed fdatasync fail-stopped the node")
	} else {
		t.Logf("Healthy: %v", err)
	}
	if err := n.Ready(); err == nil {
		t.Fatal("Ready is nil on a fail-stopped node")
	}
	if r, err := n.health.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("gRPC health of a fail-stopped node: %v %v, want NOT_SERVING", r, err)
	}
	if st, err := c.Status(ctx); err != nil || !strings.Contains(st.Refusing, "coordinator failed") {
		t.Fatalf("Status of a fail-stopped node: %+v %v, want Refusing naming the failure", st, err)
	} else {
		t.Logf("Refusing: %s", st.Refusing)
	}
}
