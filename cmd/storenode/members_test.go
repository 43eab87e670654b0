package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/internal/devca"
	"github.com/kvoffload/kvoffload/internal/freeport"
	"github.com/kvoffload/kvoffload/internal/nodehook"
	"github.com/kvoffload/kvoffload/node"
)

// openMembers starts a cluster of ids in this process (the first bootstraps, the others join
// it), with TLS on the peer, Raft and API ports when certs (a devca directory) is not "".
func openMembers(t *testing.T, certs string, ids ...string) []*node.Node {
	t.Helper()
	base := t.TempDir()
	var nodes []*node.Node
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	})
	for _, id := range ids {
		cfg := node.DefaultConfig(filepath.Join(base, id))
		cfg.ID, cfg.Txn.NodeID = id, id
		for _, a := range []*string{&cfg.RaftAddr, &cfg.APIAddr, &cfg.PeerAddr} {
			addr, err := freeport.Addr()
			if err != nil {
				t.Fatal(err)
			}
			*a = addr
		}
		if certs != "" {
			cfg.Security = node.Security{CertFile: filepath.Join(certs, id+".crt"), KeyFile: filepath.Join(certs, id+".key"),
				CAFile: filepath.Join(certs, "ca.crt"), APITLS: true}
		}
		if len(nodes) > 0 {
			cfg.Join = []string{nodes[0].PeerAddr()}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n, err := node.Open(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatalf("opening %s: %v", id, err)
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// memberRows returns members list's rows by member ID, each as its fields.
func memberRows(t *testing.T, f statusFlags) map[string][]string {
	t.Helper()
	var out bytes.Buffer
	if err := runMembersList(context.Background(), f, &out); err != nil {
		t.Fatalf("members list: %v\n%s", err, out.String())
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n")[1:] {
		fs := strings.Fields(l)
		rows[fs[0]] = fs
	}
	return rows
}

// members list prints the Raft configuration (ID, Raft, API and peer addresses, suffrage,
// leader); members remove takes a member out through the leader, found by asking --addr,
// and names a refusal (an unknown ID, an address that serves no peer service).
func TestMembersListAndRemove(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	nodes := openMembers(t, "", ids...)
	ask := statusFlags{addr: nodes[1].APIAddr(), timeout: 10 * time.Second}
	rows := memberRows(t, ask)
	for i, n := range nodes {
		want := []string{nodehook.Of(n).Raft.Addr(), n.APIAddr(), n.PeerAddr(), "voter", yesNo(i == 0)}
		if got := rows[ids[i]]; len(got) != 6 || strings.Join(got[1:], " ") != strings.Join(want, " ") {
			t.Errorf("row of %s: %v, want %v", ids[i], got, want)
		}
	}
	var js bytes.Buffer
	jf := ask
	jf.json = true
	if err := runMembersList(context.Background(), jf, &js); err != nil {
		t.Fatal(err)
	}
	var got membersJSON
	if err := json.Unmarshal(js.Bytes(), &got); err != nil || got.LeaderID != "n1" || len(got.Members) != 3 {
		t.Fatalf("members list --json: %v %+v", err, got)
	}

	var out bytes.Buffer
	if err := runMembersRemove(context.Background(), removeFlags{ask: ask}, "n3", &out); err != nil {
		t.Fatalf("members remove n3: %v", err)
	}
	if !strings.Contains(out.String(), "removed n3 (asked at "+nodes[0].PeerAddr()+")") {
		t.Errorf("members remove said %q, want it to name the leader's peer address %s", out.String(), nodes[0].PeerAddr())
	}
	if rows := memberRows(t, ask); len(rows) != 2 || rows["n3"] != nil {
		t.Errorf("after remove n3: %v", rows)
	}
	err := runMembersRemove(context.Background(), removeFlags{ask: ask}, "n9", io.Discard)
	if err == nil || !strings.Contains(err.Error(), "n9 is not a member") {
		t.Errorf("members remove n9: %v, want NotFound naming n9", err)
	}
	err = runMembersRemove(context.Background(), removeFlags{ask: ask, peer: nodes[1].APIAddr()}, "n2", io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--peer-addr") {
		t.Errorf("members remove --peer at an API address: %v, want it to ask for a --peer-addr", err)
	}
	if rows := memberRows(t, ask); len(rows) != 2 {
		t.Errorf("a refused remove changed the members: %v", rows)
	}
}

// Under TLS, members remove asks with the certificate of --tls-cert: a follower's peer
// address (--peer) redirects it to the leader, which takes the operator's certificate and
// refuses another member's, and the TLS flags go together.
func TestMembersRemoveTLS(t *testing.T) {
	certs := filepath.Join(t.TempDir(), "certs")
	if err := devca.Make(devca.Options{Dir: certs, Nodes: []string{"n1", "n2", "n3"}, Operators: []string{"ops"},
		Hosts: []string{"127.0.0.1"}, Valid: time.Hour}, io.Discard); err != nil {
		t.Fatal(err)
	}
	nodes := openMembers(t, certs, "n1", "n2", "n3")
	ask := statusFlags{addr: nodes[1].APIAddr(), timeout: 10 * time.Second, creds: apiCreds{ca: filepath.Join(certs, "ca.crt")}}
	as := func(name string) removeFlags {
		return removeFlags{ask: ask, peer: nodes[1].PeerAddr(), cert: filepath.Join(certs, name+".crt"), key: filepath.Join(certs, name+".key")}
	}
	if err := runMembersRemove(context.Background(), removeFlags{ask: statusFlags{timeout: time.Second}, cert: as("ops").cert, key: as("ops").key}, "n3", io.Discard); err == nil || !strings.Contains(err.Error(), "--tls-ca") {
		t.Errorf("--tls-cert without --tls-ca: %v, want a flag error", err)
	}
	if err := runMembersRemove(context.Background(), as("n2"), "n3", io.Discard); err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Errorf("remove n3 with n2's certificate: %v, want PermissionDenied", err)
	}
	var out bytes.Buffer
	if err := runMembersRemove(context.Background(), as("ops"), "n3", &out); err != nil {
		t.Fatalf("remove n3 as the operator: %v", err)
	}
	if !strings.Contains(out.String(), "asked at "+nodes[0].PeerAddr()) {
		t.Errorf("members remove said %q, want the leader's peer address %s (redirected from n2)", out.String(), nodes[0].PeerAddr())
	}
	if rows := memberRows(t, ask); len(rows) != 2 || rows["n3"] != nil {
		t.Errorf("after remove n3: %v", rows)
	}
}
