package node

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
)

// TestFollowerConcurrentOffloads: 8 writers offload batches through a follower at once (each
// COMMIT forwarded to the leader, the call returning once the follower applied it). Every key
// is Stored exactly once (one metadata entry, owned by the follower), readable through every
// member, and a retry of each batch under its txn ID returns the first results, Stored
// included, on the follower and on the leader alike.
func TestFollowerConcurrentOffloads(t *testing.T) {
	nodes := openCluster(t, 3)
	leader := leaderOf(t, nodes...)
	var follower *Node
	for _, nd := range nodes {
		if nd != leader {
			follower = nd
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const writers, batches, batch, size = 8, 6, 4, 16 << 10
	type call struct {
		id   kvoffload.TxnID
		objs []kvoffload.Object
		res  []kvoffload.KeyResult
	}
	calls := make([][]call, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range batches {
				keys := make([]string, batch)
				for j := range keys {
					keys[j] = keyOf(fmt.Sprintf("fco%d-%d", w, i), j)
				}
				c := call{id: kvoffload.NewTxnID(), objs: objects(3, size, keys...)}
				res, err := follower.BatchOffload(ctx, c.id, c.objs)
				if err != nil {
					t.Errorf("writer %d batch %d: %v", w, i, err)
					return
				}
				for _, r := range res {
					if r.Outcome != kvoffload.Stored {
						t.Errorf("writer %d batch %d: %s %s %s, want Stored", w, i, r.Key, r.Outcome, r.Reason)
					}
				}
				c.res = res
				calls[w] = append(calls[w], c)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var all []string
	for _, cs := range calls {
		for _, c := range cs {
			for _, o := range c.objs {
				all = append(all, o.Key)
			}
		}
	}
	for _, nd := range nodes {
		waitApplied(t, nd, leader)
		checkReadable(t, nd, 3, size, all...)
		if own := nd.FSM().Owners()[follower.cfg.ID]; own.Keys != len(all) {
			t.Fatalf("%s: the follower owns %d keys in metadata, want %d", nd.cfg.ID, own.Keys, len(all))
		}
	}
	for _, cs := range calls {
		for _, c := range cs {
			for _, nd := range []*Node{follower, leader} {
				again, err := nd.BatchOffload(ctx, c.id, c.objs)
				if err != nil {
					t.Fatalf("retry of txn %s on %s: %v", c.id, nd.cfg.ID, err)
				}
				if !reflect.DeepEqual(again, c.res) {
					t.Fatalf("retry of txn %s on %s: %+v, want the first results %+v", c.id, nd.cfg.ID, again, c.res)
				}
			}
		}
	}
	if h := follower.FSM().Hash(); h != leader.FSM().Hash() {
		waitApplied(t, follower, leader)
		if follower.FSM().Hash() != leader.FSM().Hash() {
			t.Fatal("the follower's metadata differs from the leader's after the retries")
		}
	}
}
