package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Describe a running cluster (not built yet)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("status: not built yet") },
	}
}
