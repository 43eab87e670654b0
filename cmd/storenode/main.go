// Command storenode runs kvoffload: `storenode serve` runs a cluster node, `storenode
// replay` replays a Mooncake-format trace against an embedded single node or a running
// cluster and verifies every key, `storenode status` describes a running cluster, and
// `storenode bench` measures the disk's limits and the store beside them.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kvoffload/kvoffload/workload/bench"
)

func main() {
	raiseProcs()       // before the bench's children run: they are this binary too
	bench.MaybeChild() // bench's start-up measurement re-executes this binary as its writer
	root := &cobra.Command{
		Use:           "storenode",
		Short:         "kvoffload: a write-ahead-logged, transactional offload store for KV-cache blocks",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(replayCmd(), serveCmd(), statusCmd(), certsCmd(), benchCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "storenode:", err)
		os.Exit(1)
	}
}
