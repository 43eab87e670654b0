package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kvoffload/kvoffload/node"
)

func versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the binary's version, VCS revision and Go version",
		Long: `version prints what the binary records of its build: the module version, the VCS revision
and its time (with "(modified)" when the work tree had changes not in that revision) and the Go
version. A running node exports the same facts as the metric kvoffload_build_info.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printVersion(cmd.OutOrStdout(), node.ReadBuild(), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the facts as one JSON object")
	return cmd
}

// printVersion writes b as `storenode version` shows it: one line, or JSON.
func printVersion(w io.Writer, b node.Build, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(b)
	}
	_, err := fmt.Fprintln(w, versionLine(b))
	return err
}

// versionLine is the one-line description of b that `storenode version` and
// `storenode --version` print.
func versionLine(b node.Build) string { return "storenode " + b.String() }
