package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvoffload/kvoffload/client"
)

type statusFlags struct {
	creds   apiCreds
	addr    string
	json    bool
	timeout time.Duration
}

func statusCmd() *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Describe a running cluster: members, leader, keys and bytes per node",
		Long: `status asks a member (KVOffload.Status, on its API address) for the cluster's members (id, Raft address, API
address, peer address, voter, leader), the leader, and the keys and bytes each node owns. --addr may list
several members, comma-separated: the first reachable one answers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runStatus(cmd.Context(), f, os.Stdout) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "127.0.0.1:7100", "API address of a member (host:port[,host:port...])")
	fl.BoolVar(&f.json, "json", false, "print the status as one JSON object")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Second, "give up after this long")
	f.creds.register(fl)
	return cmd
}

func runStatus(ctx context.Context, f statusFlags, w io.Writer) error {
	addrs := splitAddrs(f.addr)
	if len(addrs) == 0 {
		return fmt.Errorf("status: --addr is empty")
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	opt := client.DefaultOptions()
	opt.DialTimeout = min(opt.DialTimeout, f.timeout)
	if err := f.creds.apply(&opt); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	c, err := client.DialOptions(ctx, opt, addrs...)
	if err != nil {
		return fmt.Errorf("status: cannot reach %s: %w", f.addr, err)
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		if notAPI(err) {
			return fmt.Errorf("status: %w", apiAddrHint(c.Addr(), err))
		}
		return fmt.Errorf("status: %s: %w", c.Addr(), err)
	}
	if len(st.Members) == 0 {
		// A member lists itself once it is in a configuration: this one is starting, or its
		// --join has not succeeded yet.
		return fmt.Errorf("status: %s answers but is in no cluster yet: it is starting, or still joining through its --join address (its log says which; /readyz answers 503 until it is ready); ask another member", c.Addr())
	}
	if f.json {
		return json.NewEncoder(w).Encode(st)
	}
	printStatus(w, st)
	return nil
}

// splitAddrs splits a comma-separated address list, dropping empty entries.
func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func printStatus(w io.Writer, st client.ClusterStatus) {
	leader := st.LeaderID
	if leader == "" {
		leader = "(none known)"
	}
	fmt.Fprintf(w, "cluster        %s\n", st.ClusterID)
	fmt.Fprintf(w, "leader         %s\n", leader)
	fmt.Fprintf(w, "applied index  %d\n", st.AppliedIndex)
	fmt.Fprintf(w, "keys           %d (%d bytes)\n\n", st.Keys, st.Bytes)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT ADDR\tAPI ADDR\tPEER ADDR\tVOTER\tLEADER\tKEYS\tBYTES")
	for _, m := range st.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", m.NodeID, m.RaftAddr, m.APIAddr, m.PeerAddr,
			yesNo(m.Voter), yesNo(m.Leader), m.Keys, m.Bytes)
	}
	_ = tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
