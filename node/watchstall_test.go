package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// Two WatchEvents streams that ask for a listing and never read lose their streams after the
// idle limit, so they cannot hold the node's listing slots: a consumer that needs a listing
// (one behind the retained window) gets it.
func TestStalledListingsLoseTheirSlots(t *testing.T) {
	seed := testkit.Seed(t)
	cfg := testConfig(t.TempDir())
	cfg.APIAddr = freeAddr(t)
	cfg.WatchRetain = 16
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	n.idleLimit.Store(int64(time.Second))
	long := strings.Repeat("x", 900)
	for b := range 8 {
		keys := make([]string, 256)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-%d-%d", long, b, i)
		}
		mustOffload(t, n, objects(seed, 1, keys...))
	}
	// Hostile: a static 64 KiB window, never Recv.
	var conns []*grpc.ClientConn
	for range 2 {
		cc, err := grpc.NewClient(n.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cc)
		defer cc.Close()
		if _, err := pb.NewKVOffloadClient(cc).WatchEvents(context.Background(), &pb.WatchRequest{List: true}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)
	inUse, most := n.watch.Listings()
	t.Logf("listing slots in use after 2 s: %d of %d", inUse, most)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, n.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	got := 0
	var werr error
	for _, err := range c.Watch(ctx, client.Position{Index: 1}, client.WatchUntilNow()) {
		if err != nil {
			werr = err
			break
		}
		got++
	}
	t.Logf("honest consumer behind the window: %d events in %v, err %v", got, time.Since(start), werr)
	if werr != nil {
		t.Errorf("an honest consumer was starved of a listing by two stalled streams: %v", werr)
	}
}
