package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/cluster"
	"github.com/kvoffload/kvoffload/raftmeta"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/wal"
)

// The node's parts, for this package's tests (the module's other packages use
// internal/nodehook).

func (n *Node) Recovery() (wal.RepairReport, txn.RecoveryReport) { return n.repair, n.recovery }
func (n *Node) FSM() *fsm.FSM                                    { return n.fsm }
func (n *Node) Buckets() *bucketstore.Store                      { return n.buckets }
func (n *Node) Raft() *raftmeta.Node                             { return n.raft }

// clusterService calls node n's Cluster service in-process (no caller identity).
type clusterService struct{ n *Node }

func (s clusterService) Leave(ctx context.Context, req *pb.LeaveRequest) (*pb.LeaveResponse, error) {
	return s.n.member.Service().Leave(ctx, req)
}

func (s clusterService) Propose(ctx context.Context, req *pb.ProposeRequest) (*pb.ProposeResponse, error) {
	return s.n.member.Service().Propose(ctx, req)
}

// The membership's timing and limits (internal/cluster).
const (
	removedGrace   = cluster.RemovedGrace
	maxRedirects   = cluster.MaxRedirects
	leaderTrailer  = cluster.LeaderTrailer
	joinAnswerWait = cluster.JoinAnswerWait
)

// The ID files of a data directory, as the tests pin their format: one line, the ID.
const clusterIDFile, nodeIDFile = "CLUSTER_ID", "NODE_ID"

// readIDFile returns the ID in dir's file name, "" if there is none.
func readIDFile(dir, name, _ string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}

func readClusterID(dir string) (string, error) { return readIDFile(dir, clusterIDFile, "cluster ID") }

// inConfiguration reports whether this node appears in its Raft configuration.
func (n *Node) inConfiguration() bool {
	ok, err := n.raft.HasServer(n.cfg.ID)
	return err == nil && ok
}
