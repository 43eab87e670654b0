package node

import (
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
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
