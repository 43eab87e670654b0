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

	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
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
address, voter, leader), the leader, and the keys and bytes each node owns. --addr may list
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
		return fmt.Errorf("status: %s: %w", c.Addr(), err)
	}
	if f.json {
		return json.NewEncoder(w).Encode(statusJSON(st))
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

// clusterStatus is the --json form of a StatusResponse. Field names are the --json contract.
type clusterStatus struct {
	ClusterID    string         `json:"cluster_id"`
	LeaderID     string         `json:"leader_id"`
	AppliedIndex uint64         `json:"applied_index"`
	Keys         uint64         `json:"keys"`
	Bytes        uint64         `json:"bytes"`
	Members      []memberStatus `json:"members"`
}

type memberStatus struct {
	NodeID   string `json:"node_id"`
	RaftAddr string `json:"raft_addr"`
	APIAddr  string `json:"api_addr"`
	PeerAddr string `json:"peer_addr"`
	Voter    bool   `json:"voter"`
	Leader   bool   `json:"leader"`
	Keys     uint64 `json:"keys"`
	Bytes    uint64 `json:"bytes"`
}

func statusJSON(st *kvoffloadv1.StatusResponse) clusterStatus {
	out := clusterStatus{ClusterID: st.GetClusterId(), LeaderID: st.GetLeaderId(), AppliedIndex: st.GetAppliedIndex(),
		Keys: st.GetKeys(), Bytes: st.GetBytes(), Members: []memberStatus{}}
	for _, m := range st.GetMembers() {
		out.Members = append(out.Members, memberStatus{NodeID: m.GetNodeId(), RaftAddr: m.GetRaftAddr(),
			APIAddr: m.GetApiAddr(), PeerAddr: m.GetPeerAddr(), Voter: m.GetVoter(), Leader: m.GetLeader(), Keys: m.GetKeys(), Bytes: m.GetBytes()})
	}
	return out
}

func printStatus(w io.Writer, st *kvoffloadv1.StatusResponse) {
	leader := st.GetLeaderId()
	if leader == "" {
		leader = "(none known)"
	}
	fmt.Fprintf(w, "cluster        %s\n", st.GetClusterId())
	fmt.Fprintf(w, "leader         %s\n", leader)
	fmt.Fprintf(w, "applied index  %d\n", st.GetAppliedIndex())
	fmt.Fprintf(w, "keys           %d (%d bytes)\n\n", st.GetKeys(), st.GetBytes())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT ADDR\tAPI ADDR\tPEER ADDR\tVOTER\tLEADER\tKEYS\tBYTES")
	for _, m := range st.GetMembers() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", m.GetNodeId(), m.GetRaftAddr(), m.GetApiAddr(), m.GetPeerAddr(),
			yesNo(m.GetVoter()), yesNo(m.GetLeader()), m.GetKeys(), m.GetBytes())
	}
	_ = tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
