package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvoffload/kvoffload"
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
several members, comma-separated: the first reachable one answers. Then it asks every member's API
address itself, each within 2 s: UP says whether that member answers now (the answering member's view
lists a stopped member like a running one). A member that refuses offloads and reads (removed by Leave,
fail-stopped) still answers, and a REFUSING line says why. The build and data space lines are the
answering member's own: its binary, its data filesystem's free bytes and its space reserve. status exits non-zero when the member that
answered refuses, or knows no leader (after printing what it saw).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runStatus(cmd.Context(), f, os.Stdout) },
	}
	registerAsk(cmd.Flags(), &f, 5*time.Second)
	cmd.Flags().BoolVar(&f.json, "json", false, "print the status as one JSON object")
	return cmd
}

func runStatus(ctx context.Context, f statusFlags, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	st, opt, answered, err := askStatus(ctx, f)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	up := probeMembers(ctx, opt, st, answered)
	if f.json {
		if err := json.NewEncoder(w).Encode(statusJSON{ClusterStatus: st, Up: up}); err != nil {
			return err
		}
	} else {
		printStatus(w, st, up)
	}
	return unhealthy(st, answered)
}

// askStatus asks the first member of f.addr that answers for the cluster's status
// (KVOffload.Status on its API address), as status, members list and members remove do. It
// returns the client options it used and the address that answered. A member in no cluster
// yet is an error.
func askStatus(ctx context.Context, f statusFlags) (_ client.ClusterStatus, _ client.Options, answered string, _ error) {
	opt := client.DefaultOptions()
	addrs := splitAddrs(f.addr)
	if len(addrs) == 0 {
		return client.ClusterStatus{}, opt, "", errors.New("--addr is empty")
	}
	opt.DialTimeout = min(opt.DialTimeout, f.timeout)
	if err := f.creds.apply(&opt); err != nil {
		return client.ClusterStatus{}, opt, "", err
	}
	c, err := client.DialOptions(ctx, opt, addrs...)
	if err != nil {
		return client.ClusterStatus{}, opt, "", fmt.Errorf("cannot reach %s: %w", f.addr, err)
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		if notAPI(err) {
			return st, opt, "", apiAddrHint(c.Addr(), err)
		}
		return st, opt, "", fmt.Errorf("%s: %w", c.Addr(), err)
	}
	if len(st.Members) == 0 {
		// A member lists itself once it is in a configuration: this one is starting, or its
		// --join has not succeeded yet.
		return st, opt, "", fmt.Errorf("%s answers but is in no cluster yet: it is starting, or still joining through its --join address (its log says which; /readyz answers 503 until it is ready); ask another member", c.Addr())
	}
	return st, opt, c.Addr(), nil
}

// unhealthy is status's error, after it has printed st, when the view needs the operator:
// the member that answered at addr refuses offloads and reads, or it knows no leader. status
// then exits non-zero.
func unhealthy(st client.ClusterStatus, addr string) error {
	var why []string
	if st.Refusing != "" {
		why = append(why, fmt.Sprintf("the member at %s refuses offloads and reads (%s)", addr, st.Refusing))
	}
	if st.LeaderID == "" && st.Refusing == "" { // a refusing member's view is its own, not the cluster's
		why = append(why, fmt.Sprintf("the member at %s knows no leader: the cluster commits nothing until one is elected", addr))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("status: %s", strings.Join(why, "; "))
}

// statusJSON is what status --json prints: the answering member's view and, per member ID,
// whether that member answered status's own probe.
type statusJSON struct {
	client.ClusterStatus
	Up map[string]bool `json:"up"`
}

// probeMembers asks each member's API address for its status, concurrently, each within
// probeTimeout, and reports which answered (answered: the address that gave st). The
// addresses come from the cluster, not from the user, so the probes carry no bearer token
// (it would go in plaintext to whatever address a member record names, under
// --insecure-token): a member that refuses a call without one (kvoffload.ErrDenied) has
// answered.
func probeMembers(ctx context.Context, opt client.Options, st client.ClusterStatus, answered string) map[string]bool {
	opt.Token, opt.InsecureToken = "", false
	up := make(map[string]bool, len(st.Members))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range st.Members {
		if m.APIAddr == answered {
			up[m.NodeID] = true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			ok := false
			if c, err := client.DialOptions(ctx, opt, m.APIAddr); err == nil {
				_, err = c.Status(ctx)
				ok = err == nil || errors.Is(err, kvoffload.ErrDenied)
				_ = c.Close()
			}
			mu.Lock()
			up[m.NodeID] = ok
			mu.Unlock()
		}()
	}
	wg.Wait()
	return up
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

func printStatus(w io.Writer, st client.ClusterStatus, up map[string]bool) {
	leader := st.LeaderID
	if leader == "" {
		leader = "(none known)"
	}
	fmt.Fprintf(w, "cluster        %s\n", st.ClusterID)
	fmt.Fprintf(w, "leader         %s\n", leader)
	fmt.Fprintf(w, "applied index  %d\n", st.AppliedIndex)
	fmt.Fprintf(w, "keys           %d (%d bytes)\n", st.Keys, st.Bytes)
	if st.Build != "" { // the answering member's own facts
		fmt.Fprintf(w, "build          %s (the member that answered)\n", st.Build)
		if st.FreeBytes >= 0 {
			fmt.Fprintf(w, "data space     %d bytes free on the member that answered; space reserve %d bytes (kept for the WAL and the Raft log)\n", st.FreeBytes, st.ReserveBytes)
		}
	}
	if st.Refusing != "" {
		fmt.Fprintf(w, "REFUSING       the member that answered refuses offloads and reads, and its view may be stale: %s\n", st.Refusing)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tUP\tRAFT ADDR\tAPI ADDR\tPEER ADDR\tVOTER\tLEADER\tKEYS\tBYTES")
	for _, m := range st.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", m.NodeID, yesNo(up[m.NodeID]), m.RaftAddr, m.APIAddr, m.PeerAddr,
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
