package node

import (
	"context"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
)

// A member that was down for a while serves its keys through the others within about a
// second of being back: the peers' reconnection backoff is capped (peerBackoff), where gRPC's
// default grows to two minutes (reads would be Unavailable for seconds after the owner's
// readyz, and after a long outage for minutes).
func TestOwnerServesSoonAfterAnOutage(t *testing.T) {
	nodes := openCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owner, reader := nodes[2], nodes[0]
	keys := []string{keyOf("back", 0), keyOf("back", 1)}
	mustOffload(t, owner, objects(3, 4<<10, keys...))
	waitApplied(t, reader, owner)
	checkReadable(t, reader, 3, 4<<10, keys...)

	cfg := owner.cfg
	mustClose(t, owner)
	// Reads through the reader fail while the owner is down, and its connection to the owner
	// backs off. By gRPC's default the attempts come 1, 2.6, 5.2, 9.3, 15.9 s after the first
	// failure, so after 10 s down and a reopen of a few seconds the next one was seconds away
	// (this test failed at the 2.5 s bound below without peerBackoff).
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if res, err := reader.BatchGet(ctx, keys[:1]); err != nil || res[0].Status != kvoffload.Unavailable {
			t.Fatalf("owner down: %v %+v, want Unavailable", err, res)
		}
	}
	t0 := time.Now()
	back := mustOpen(t, cfg)
	t.Logf("reopened in %s", time.Since(t0))
	defer mustClose(t, back)
	start := time.Now()
	for {
		res, err := reader.BatchGet(ctx, keys)
		if err == nil && res[0].Status == kvoffload.Found && res[1].Status == kvoffload.Found {
			break
		}
		if time.Since(start) > 2500*time.Millisecond {
			t.Fatalf("reads through another member still fail %s after the owner is back: %v %+v", time.Since(start), err, res)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the owner's keys read through another member %s after it was back", time.Since(start).Round(time.Millisecond))
}
