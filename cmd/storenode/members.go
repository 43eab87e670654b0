package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/node"
)

func membersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List the cluster's members, or remove one",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(membersListCmd(), membersRemoveCmd())
	return cmd
}

// registerAsk registers the flags of a command that asks a member for the cluster's status,
// as status does.
func registerAsk(fl *pflag.FlagSet, f *statusFlags, timeout time.Duration) {
	fl.StringVar(&f.addr, "addr", "127.0.0.1:7100", "API address of a member (host:port[,host:port...])")
	fl.DurationVar(&f.timeout, "timeout", timeout, "give up after this long")
	f.creds.register(fl)
}

func membersListCmd() *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the Raft configuration: ID, addresses, suffrage, leader",
		Long: `list asks a member (KVOffload.Status on its API address, as status does) for the cluster's
Raft configuration and prints each member's ID, Raft, API and peer addresses, suffrage (voter or
nonvoter) and whether it leads. It exits non-zero, after printing, when the member that answered
refuses offloads and reads or knows no leader.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runMembersList(cmd.Context(), f, cmd.OutOrStdout()) },
	}
	registerAsk(cmd.Flags(), &f, 5*time.Second)
	cmd.Flags().BoolVar(&f.json, "json", false, "print the members as one JSON object")
	return cmd
}

// membersJSON is what members list --json prints.
type membersJSON struct {
	LeaderID string          `json:"leader_id"`
	Members  []client.Member `json:"members"`
}

func runMembersList(ctx context.Context, f statusFlags, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	st, _, answered, err := askStatus(ctx, f)
	if err != nil {
		return fmt.Errorf("members list: %w", err)
	}
	if f.json {
		if err := json.NewEncoder(w).Encode(membersJSON{LeaderID: st.LeaderID, Members: st.Members}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tRAFT ADDR\tAPI ADDR\tPEER ADDR\tSUFFRAGE\tLEADER")
		for _, m := range st.Members {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.NodeID, m.RaftAddr, m.APIAddr, m.PeerAddr, suffrage(m.Voter), yesNo(m.Leader))
		}
		_ = tw.Flush()
	}
	if err := unhealthy(st, answered); err != nil {
		return fmt.Errorf("members list: %w", err)
	}
	return nil
}

func suffrage(voter bool) string {
	if voter {
		return "voter"
	}
	return "nonvoter"
}

// removeFlags are the flags of members remove: how to find the leader (status's flags, or
// --peer), and the certificate Leave is asked with under TLS.
type removeFlags struct {
	ask  statusFlags
	peer string // a member's peer address, instead of asking --addr for the leader's
	cert string // with key: the certificate Leave is asked with under TLS
	key  string
}

func membersRemoveCmd() *cobra.Command {
	var f removeFlags
	cmd := &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a member from the cluster (Leave); its keys are dropped from the metadata",
		Long: `remove asks the cluster's leader to remove member ID (kvoffload.v1.Cluster/Leave on its peer
address): the member leaves the Raft configuration and the member directory, and the keys whose
bytes it held are dropped from the metadata (clients offload them again). Stop its process
next: a removed member accepts no offload. The leader's peer address comes from --addr's status
(a member's API address, with --tls-ca, --token-file as for status) or is given with --peer
(any member's peer address; a member that is not the leader forwards the call or, with TLS,
names the leader, whom remove then asks). With TLS on the peer port, give --tls-ca and an
operator's certificate (storenode certs --operators) or the member's own as --tls-cert and
--tls-key. A Leave cut short can be sent again: it finishes dropping the keys.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMembersRemove(cmd.Context(), f, args[0], cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	registerAsk(fl, &f.ask, 2*time.Minute)
	fl.StringVar(&f.peer, "peer", "", "peer address (--peer-addr) of a member to ask, instead of the leader's from --addr")
	fl.StringVar(&f.cert, "tls-cert", "", "certificate (PEM) Leave is asked with on a peer port with TLS: an operator's, or the member's own")
	fl.StringVar(&f.key, "tls-key", "", "the key of --tls-cert (PEM)")
	return cmd
}

// peerTLS is the TLS configuration of the Leave call: nil (plaintext) without --tls-cert.
func (f removeFlags) peerTLS() (*tls.Config, error) {
	switch {
	case f.cert == "" && f.key == "":
		return nil, nil
	case f.cert == "" || f.key == "" || f.ask.creds.ca == "":
		return nil, errors.New("--tls-cert, --tls-key and --tls-ca go together (a peer port with TLS takes Leave only from a certificate of the cluster CA)")
	}
	cfg, err := node.OperatorTLS(f.cert, f.key, f.ask.creds.ca)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s: %w", f.cert, err)
	}
	return cfg, nil
}

func runMembersRemove(ctx context.Context, f removeFlags, id string, w io.Writer) error {
	tlsConfig, err := f.peerTLS()
	if err != nil {
		return fmt.Errorf("members remove: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.ask.timeout)
	defer cancel()
	at := f.peer
	if at == "" {
		if at, err = leaderPeer(ctx, f.ask); err != nil {
			if tlsConfig != nil {
				// --tls-ca makes the API call TLS too; a cluster may serve its API without.
				err = fmt.Errorf("%w (finding the leader through --addr, whose API is asked over TLS with --tls-ca; if the API is plaintext, give a member's peer address with --peer instead)", err)
			}
			return fmt.Errorf("members remove %s: %w", id, err)
		}
	}
	r, err := node.RemoveMember(ctx, at, id, tlsConfig)
	if err != nil {
		return fmt.Errorf("members remove %s: %w", id, err)
	}
	fmt.Fprintf(w, "removed %s (asked at %s); %d keys whose bytes it held were dropped from the metadata. Stop its process now.\n", id, r.At, r.KeysDropped)
	return nil
}

// leaderPeer asks --addr for the cluster's status and returns the leader's peer address, or,
// while no leader is known, that of the member that answered (it names the leader once one is
// elected, and remove waits for it).
func leaderPeer(ctx context.Context, f statusFlags) (string, error) {
	st, _, answered, err := askStatus(ctx, f)
	if err != nil {
		return "", err
	}
	var fallback string
	for _, m := range st.Members {
		switch {
		case m.Leader && m.PeerAddr != "":
			return m.PeerAddr, nil
		case m.APIAddr == answered:
			fallback = m.PeerAddr
		}
	}
	if fallback == "" {
		return "", fmt.Errorf("%s names no leader's or its own peer address: give a member's peer address with --peer", answered)
	}
	return fallback, nil
}
