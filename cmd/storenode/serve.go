package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func serveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run a cluster node (not built yet)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("serve: not built yet") },
	}
}
