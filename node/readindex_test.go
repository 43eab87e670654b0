package node

import (
	"context"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
)

// TestReadAfterAckOnAnyNode: a key acknowledged through one follower is found at once
// through the other, with no wait for replication: a miss in the reader's local metadata
// is confirmed with the leader's read index before it is answered (Mooncake #2827 was
// readers told "key not found" for keys the store had acknowledged).
func TestReadAfterAckOnAnyNode(t *testing.T) {
	nodes := openCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var followers []*Node
	for _, nd := range nodes {
		if !nd.Raft().IsLeader() {
			followers = append(followers, nd)
		}
	}
	if len(followers) != 2 {
		t.Fatalf("%d followers, want 2", len(followers))
	}
	const rounds = 30
	for i := range rounds {
		writer, reader := followers[i%2], followers[1-i%2]
		key := keyOf("rai", i)
		mustOffload(t, writer, objects(11, 4<<10, key))
		got, err := reader.BatchGet(ctx, []string{key})
		if err != nil || got[0].Status != kvoffload.Found {
			t.Fatalf("round %d: read via %s right after the ack via %s: %v %+v", i, reader.cfg.ID, writer.cfg.ID, err, got)
		}
		key2 := keyOf("rai-ex", i)
		mustOffload(t, reader, objects(11, 4<<10, key2))
		if ex := mustExists(writer.BatchExists(ctx, []string{key, key2}, 0)); ex.PrefixPresent != 2 {
			t.Fatalf("round %d: exists via %s right after the ack via %s: %+v", i, writer.cfg.ID, reader.cfg.ID, ex)
		}
	}
	for _, f := range followers {
		st, err := f.layerStats()
		if err != nil || st.Txn.ReadIndexFailed != 0 {
			t.Fatalf("%s: %d read indexes failed (%v)", f.cfg.ID, st.Txn.ReadIndexFailed, err)
		}
	}
}
