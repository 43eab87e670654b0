package raftmeta

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A follower learns a commit from the AppendEntries the leader sends when its commit index
// advances, not from the next entry or the CommitTimeout tick: with CommitTimeout at 3 s and
// one command at a time, every follower applies each command well within it. The forwarded
// proposals of internal/forward wait for this node's apply, so their latency is this.
func TestFollowerLearnsCommitPromptly(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const commitTimeout, bound = 3 * time.Second, time.Second
	var nodes []*Node
	for i := range 3 {
		cfg := clusterConfig(t, fmt.Sprintf("n%d", i+1))
		cfg.Bootstrap = i == 0
		cfg.BindAddr = "127.0.0.1:0"
		cfg.CommitTimeout = commitTimeout
		n, _ := mustOpen(t, cfg)
		nodes = append(nodes, n)
	}
	mustLead(t, nodes[0])
	for _, n := range nodes[1:] {
		addAny(t, nodes, n.cfg.NodeID, n.Addr(), true)
	}
	leader := leaderOf(t, nodes)
	for i := range 5 {
		res := mustPropose(t, leader, commitCmd(i+1, fmt.Sprint("push", i), 1))
		start := time.Now()
		for _, f := range without(nodes, leader) {
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			err := f.WaitApplied(ctx, res.Index)
			cancel()
			if err != nil {
				t.Fatalf("command %d: follower %s has not applied index %d within %s of the leader's apply (CommitTimeout %s): %v",
					i, f.cfg.NodeID, res.Index, time.Since(start), commitTimeout, err)
			}
		}
		t.Logf("command %d: both followers applied it %s after the leader", i, time.Since(start))
	}
}
