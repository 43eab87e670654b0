// Command storenode runs kvoffload: `storenode serve` runs a cluster node, `storenode
// replay` replays a Mooncake-format trace against an embedded single node or a running
// cluster and verifies every key, `storenode status` describes a running cluster,
// `storenode bench` measures the disk's limits and the store beside them, and `storenode
// version` names the build.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kvoffload/kvoffload/node"
	"github.com/kvoffload/kvoffload/workload/bench"
)

func main() {
	raiseProcs()       // before the bench's children run: they are this binary too
	bench.MaybeChild() // bench's start-up measurement re-executes this binary as its writer
	if err := rootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "storenode:", err)
		os.Exit(1)
	}
}

// rootCmd is the storenode command with its subcommands.
func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "storenode",
		Short:         "kvoffload: a write-ahead-logged, transactional offload store for KV-cache blocks",
		Version:       versionLine(node.ReadBuild()),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n") // --version prints what `storenode version` does
	root.AddCommand(replayCmd(), serveCmd(), statusCmd(), eventsCmd(), membersCmd(), certsCmd(), benchCmd(), versionCmd())
	return root
}
