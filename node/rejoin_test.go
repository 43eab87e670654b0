package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// removedMsg is the advice Open gives a removed node.
const removedMsg = "was removed from the cluster; start a fresh node with a new --id and an empty --data"

// TestRemovedNodeRestartRefused: a node removed with Leave and restarted with its original
// flags (same data directory, --join set) refuses to start with ErrRemoved and does not join
// again, every time it is restarted; the remaining nodes' Raft configuration and member
// directory still exclude it. Both when the node was running when it was removed (it received
// its removal) and when it was down (its own log still lists it; the members tell it).
func TestRemovedNodeRestartRefused(t *testing.T) {
	for _, down := range []bool{false, true} {
		name := map[bool]string{false: "running", true: "down"}[down]
		t.Run(name, func(t *testing.T) {
			nodes := openCluster(t, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			leader := leaderOf(t, nodes...)
			var followers []*Node
			for _, nd := range nodes {
				if nd != leader {
					followers = append(followers, nd)
				}
			}
			gone, via := followers[0], followers[1]
			mustOffload(t, gone, objects(3, 8<<10, keyOf("rj", 0)))
			cfg := gone.cfg
			if len(cfg.Join) == 0 {
				cfg.Join = []string{leader.PeerAddr()}
			}
			if down {
				mustClose(t, gone)
			}
			if _, err := (clusterService{n: via}).Leave(ctx, &pb.LeaveRequest{NodeId: cfg.ID}); err != nil {
				t.Fatal(err)
			}
			if !down {
				// It received its removal (the leader replicates up to the removal, then
				// stops): its own configuration no longer lists it.
				for deadline := time.Now().Add(10 * time.Second); gone.inConfiguration(); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%s never received its removal", cfg.ID)
					}
				}
				mustClose(t, gone)
				// With no member reachable, its own state is the evidence.
				alone := cfg
				alone.Join = []string{freeAddr(t)}
				octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
				n, err := Open(octx, alone)
				ocancel()
				if err == nil {
					n.Close()
					t.Fatal("the removed node started with no member reachable")
				}
				if !errors.Is(err, ErrRemoved) || !strings.Contains(err.Error(), "no leader contacts it") {
					t.Fatalf("restart of the removed node with no member reachable: %v; want ErrRemoved on its own evidence", err)
				}
				t.Logf("restart with no member reachable refused: %v", err)
			}
			for attempt := 1; attempt <= 2; attempt++ {
				octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
				start := time.Now()
				n, err := Open(octx, cfg)
				ocancel()
				if err == nil {
					n.Close()
					t.Fatalf("restart %d of the removed node %s started it", attempt, cfg.ID)
				}
				if !errors.Is(err, ErrRemoved) || !strings.Contains(err.Error(), "node "+cfg.ID+" "+removedMsg) {
					t.Fatalf("restart %d of the removed node: %v; want ErrRemoved with %q", attempt, err, removedMsg)
				}
				named := false // the leader that said so, by ID and peer address (either member may lead)
				for _, nd := range []*Node{leader, via} {
					named = named || strings.Contains(err.Error(), fmt.Sprintf("the cluster's leader %s, answering at %s,", nd.cfg.ID, nd.PeerAddr()))
				}
				if !named {
					t.Fatalf("restart %d of the removed node: %v; want it to name the leader that said so and its address", attempt, err)
				}
				t.Logf("restart %d refused after %v: %v", attempt, time.Since(start).Round(time.Millisecond), err)
			}
			time.Sleep(300 * time.Millisecond) // a join in flight would have landed by now
			for _, nd := range []*Node{leader, via} {
				waitApplied(t, nd, leaderOf(t, leader, via))
				servers, err := nd.Raft().Servers()
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range servers {
					if s.ID == cfg.ID {
						t.Fatalf("%s lists the removed node %s in its Raft configuration again: %+v", nd.cfg.ID, cfg.ID, servers)
					}
				}
				if len(servers) != 2 {
					t.Fatalf("%s: Raft configuration %+v, want the two remaining nodes", nd.cfg.ID, servers)
				}
				if _, ok := nd.FSM().Member(cfg.ID); ok {
					t.Fatalf("%s lists the removed node %s in the member directory again", nd.cfg.ID, cfg.ID)
				}
			}
			mustOffload(t, via, objects(3, 8<<10, keyOf("rj", 1)))
		})
	}
}

// TestFirstJoinCutShortRejoins: a node whose first join never completed (its Raft state was
// created, no member was reachable, no leader ever sent it an entry) joins on its next start,
// and a restart of the member it has become is a plain restart.
func TestFirstJoinCutShortRejoins(t *testing.T) {
	nodes := openCluster(t, 2)
	cfg := testConfig(filepath.Join(t.TempDir(), "c"))
	cfg.ID, cfg.Txn.NodeID = "c", "c"
	cfg.RaftAddr, cfg.APIAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	cfg.Join = []string{freeAddr(t)} // nobody listens there
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	n, err := Open(ctx, cfg)
	cancel()
	if err == nil {
		n.Close()
		t.Fatal("joined through an address nobody listens on")
	}
	if _, serr := os.Stat(filepath.Join(cfg.DataDir, "raft", "raft.db")); serr != nil {
		t.Fatalf("the cut-short join left no Raft state (%v); the test needs it", serr)
	}
	t.Logf("first join cut short: %v", err)

	cfg.Join = []string{nodes[1].PeerAddr()}
	c := mustOpen(t, cfg)
	keys := []string{keyOf("cs", 0)}
	mustOffload(t, c, objects(4, 8<<10, keys...))
	leader := leaderOf(t, nodes...)
	waitApplied(t, leader, c)
	if ok, err := leader.Raft().HasServer("c"); err != nil || !ok {
		t.Fatalf("the leader's configuration lacks c after its second start: %v %v", ok, err)
	}
	mustClose(t, c)
	c = mustOpen(t, cfg) // a member restarting with --join set
	defer c.Close()
	checkReadable(t, c, 4, 8<<10, keys...)
	servers, err := leader.Raft().Servers()
	if err != nil || len(servers) != 3 {
		t.Fatalf("configuration after c's restart: %+v %v, want three servers", servers, err)
	}
}

// TestRemovedIDNeverJoinsAgain: after Leave, a node with the removed ID and an empty data
// directory (with TLS: the removed member's own certificate, valid until the CA is rotated)
// is refused at Join, and a node with a new ID joins. Refusing only an ID still in the
// member directory is not enough: the removed member would come back with full member
// rights.
func TestRemovedIDNeverJoinsAgain(t *testing.T) {
	nodes := openCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gone := nodes[2]
	if _, err := (clusterService{n: nodes[0]}).Leave(ctx, &pb.LeaveRequest{NodeId: gone.cfg.ID}); err != nil {
		t.Fatalf("leave %s: %v", gone.cfg.ID, err)
	}
	mustClose(t, gone)
	cfg := testConfig(t.TempDir())
	cfg.ID, cfg.Txn.NodeID = gone.cfg.ID, gone.cfg.ID
	cfg.RaftAddr, cfg.APIAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	cfg.Join = []string{nodes[0].PeerAddr(), nodes[1].PeerAddr()}
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	n, err := Open(ctx, cfg)
	if n != nil {
		_ = n.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "was removed from this cluster") {
		t.Fatalf("a node with removed ID %s joined again: %v", cfg.ID, err)
	}
	if strings.Contains(logs.String(), "retrying") {
		t.Errorf("a final refusal was logged as retried:\n%s", logs.String())
	}
	join := cfg.Join
	cfg = testConfig(t.TempDir())
	cfg.ID, cfg.Txn.NodeID, cfg.Join = "d", "d", join
	cfg.RaftAddr, cfg.APIAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	fresh := mustOpen(t, cfg)
	defer mustClose(t, fresh)
	if !slices.Contains(mustServers(t, nodes[0]), "d") {
		t.Fatal("a node with a new ID did not join")
	}
}
