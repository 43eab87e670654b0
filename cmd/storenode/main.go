// Command storenode runs kvoffload: `storenode serve` runs a cluster node, `storenode
// replay` replays a Mooncake-format trace against an embedded single node or a running
// cluster and verifies every key, and `storenode status` describes a running cluster.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "storenode",
		Short:         "kvoffload: a write-ahead-logged, transactional offload store for KV-cache blocks",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(replayCmd(), serveCmd(), statusCmd(), certsCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "storenode:", err)
		os.Exit(1)
	}
}
