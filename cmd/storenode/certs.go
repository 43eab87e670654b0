package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/kvoffload/kvoffload/internal/devca"
	"github.com/kvoffload/kvoffload/node"
)

// certsFlags are the flags of `storenode certs`.
type certsFlags struct {
	dir       string
	nodes     []string
	operators []string
	hosts     []string
	valid     time.Duration
}

func certsCmd() *cobra.Command {
	var f certsFlags
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make a development cluster CA and node certificates",
		Long: `certs writes a cluster CA (ca.crt, ca.key) and one certificate per node (<id>.crt,
<id>.key, Common Name = the node ID, usable as server and client) and per operator
(<name>.crt, <name>.key, OU ` + node.OperatorUnit + `, client only: may call Leave) into --dir.
An existing ca.crt/ca.key there is reused, so nodes can be added later; an existing node
certificate is not overwritten. Keys are ECDSA P-256, written 0600.

It is for development and tests: a production cluster's CA belongs in the operator's PKI
(docs/security.md says what a node expects of its certificates).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return devca.Make(devca.Options{Dir: f.dir, Nodes: f.nodes, Operators: f.operators, Hosts: f.hosts, Valid: f.valid}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&f.dir, "dir", "./certs", "directory for the CA and certificates")
	cmd.Flags().StringSliceVar(&f.nodes, "nodes", nil, "node IDs to make certificates for (n1,n2,n3)")
	cmd.Flags().StringSliceVar(&f.operators, "operators", nil, "operator names to make client certificates for")
	cmd.Flags().StringSliceVar(&f.hosts, "hosts", []string{"127.0.0.1", "::1", "localhost"}, "IP addresses and DNS names put in node certificates (for clients that verify the API's host name)")
	cmd.Flags().DurationVar(&f.valid, "valid", 365*24*time.Hour, "validity of the certificates")
	return cmd
}
