package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
)

// Two members each reading the other's keys, each read holding its whole budget
// (MaxBufferedBytes) while it waits for the owner, still read every key: the owners' side of
// the reads draws on a budget of its own (metrics.peerBuffers). With one budget for both,
// each owner's read would wait for bytes the other member's read holds, and every key would
// come back Unavailable after the owner deadline.
func TestCrossReadsAtTheBudget(t *testing.T) {
	nodes := openCluster(t, 2)
	a, b := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var aKeys, bKeys []string
	for i := range 4 {
		aKeys, bKeys = append(aKeys, keyOf("cross-a", i)), append(bKeys, keyOf("cross-b", i))
	}
	mustOffload(t, a, objects(7, 1<<20, aKeys...))
	mustOffload(t, b, objects(7, 1<<20, bKeys...))
	waitApplied(t, a, b)
	waitApplied(t, b, a)
	for _, n := range nodes {
		m := n.metrics
		m.buffers, m.peerBuffers = newBudget(4<<20, m.bufferedBytes, m.bufferWaits), newBudget(4<<20, m.peerBuffered, m.peerWaits)
	}
	var held sync.WaitGroup // both reads hold their budget before either reaches its owner
	held.Add(2)
	read := func(n *Node, keys []string) []kvoffload.GetResult {
		buf := n.metrics.buffers.NewHold()
		defer buf.Release()
		reserve := buf.Reserver(ctx)
		out := make([]kvoffload.GetResult, len(keys))
		err := n.batchGetEach(ctx, keys, func(bytes int64) error {
			err := reserve(bytes)
			held.Done()
			held.Wait()
			return err
		}, func(i int, r kvoffload.GetResult) bool { out[i] = r; return true })
		if err != nil {
			t.Errorf("read through %s: %v", n.cfg.ID, err)
		}
		return out
	}
	var wg sync.WaitGroup
	var viaA, viaB []kvoffload.GetResult
	wg.Add(2)
	go func() { defer wg.Done(); viaA = read(a, bKeys) }()
	go func() { defer wg.Done(); viaB = read(b, aKeys) }()
	wg.Wait()
	for _, res := range [][]kvoffload.GetResult{viaA, viaB} {
		for _, r := range res {
			if r.Status != kvoffload.Found {
				t.Fatalf("%s: %s %s", r.Key, r.Status, r.Reason)
			}
		}
	}
}
