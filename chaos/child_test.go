//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/internal/nodehook"
	"github.com/kvoffload/kvoffload/node"
)

// The child process: the test binary re-executed with childEnv set. It opens a node (running
// recovery), offloads batches of 8 x 1 MiB from concurrent writers, and appends every
// acknowledged key to the ack file, one "key generation" line each, before moving on. The
// parent kills it.
const (
	childEnv     = "KVOFFLOAD_CHAOS_CHILD" // data directory
	childAckEnv  = "KVOFFLOAD_CHAOS_ACK"
	childSeedEnv = "KVOFFLOAD_CHAOS_SEED"
	childRunEnv  = "KVOFFLOAD_CHAOS_RUN"
	childBatches = "KVOFFLOAD_CHAOS_BATCHES"
	childQuota   = "KVOFFLOAD_CHAOS_QUOTA" // bytes; empty or 0: no quota
)

const (
	childWriters   = 4
	childBatchKeys = 8
	childBlock     = 1 << 20
)

func childConfig(dir string) node.Config {
	cfg := node.DefaultConfig(dir)
	cfg.BucketSize = 64 << 20
	cfg.SnapshotThreshold = 64
	cfg.TrailingLogs = 32
	return cfg
}

// quotaConfig is childConfig with a quota: keys are evicted once quota bytes are live, and
// buckets are 16 MiB so that evictions also empty and remove whole bucket files.
func quotaConfig(dir string, quota int64) node.Config {
	cfg := childConfig(dir)
	if quota > 0 {
		cfg.Capacity, cfg.BucketSize = quota, 16<<20
	}
	return cfg
}

func childMain() int {
	dir := os.Getenv(childEnv)
	seed, _ := strconv.ParseUint(os.Getenv(childSeedEnv), 10, 64)
	run := os.Getenv(childRunEnv)
	batches, _ := strconv.Atoi(os.Getenv(childBatches))
	ack, err := os.OpenFile(os.Getenv(childAckEnv), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o640)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	quota, _ := strconv.ParseInt(os.Getenv(childQuota), 10, 64)
	n, err := node.Open(context.Background(), quotaConfig(dir, quota))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		return 3
	}
	w := Workload{Seed: seed, BlockSize: childBlock}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for wr := range childWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				objs := make([]kvoffload.Object, childBatchKeys)
				for i := range objs {
					k := fmt.Sprintf("chaos@run:%s@w:%d@b:%d@i:%d", run, wr, b, i)
					if i == 0 {
						k = fmt.Sprintf("chaos@run:%s@shared:%d", run, b) // every writer offloads it: joins
					}
					objs[i] = kvoffload.Object{Key: k, Value: w.Payload(k)}
				}
				res, err := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objs)
				if err != nil {
					fmt.Fprintln(os.Stderr, "child: offload:", err)
					return
				}
				mu.Lock()
				for _, r := range res {
					if r.Outcome.OK() {
						fmt.Fprintln(ack, r.Key, ackedGen(n, r.Key))
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := n.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "child: close:", err)
		return 4
	}
	return 0
}

// ackedGen is the generation of key live on n just after its offload was acknowledged, or,
// if an eviction already removed it, the generation before its removal's tombstone:
// CheckNodeEvicting accepts the key's absence only with a later generation recorded.
func ackedGen(n *node.Node, key string) uint64 {
	if e, ok := nodehook.Of(n).FSM.Lookup(key); ok {
		return e.Gen
	}
	return max(nodehook.Of(n).FSM.Generation(key), 1) - 1
}
