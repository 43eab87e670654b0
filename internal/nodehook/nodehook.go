// Package nodehook hands this module's checks, tools and tests the parts of a running node
// that node's public API does not show: the metadata, the bucket store, Raft, and what
// start-up repaired and recovered. Package node fills it; being internal, it is importable
// only inside this module, so embedders never see these types through node.
package nodehook

import (
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/raftmeta"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/wal"
)

// Parts are a node's internals, for read-only use: checks, tools and tests.
type Parts struct {
	FSM      *fsm.FSM
	Buckets  *bucketstore.Store
	Raft     *raftmeta.Node
	Repair   wal.RepairReport   // what start-up repaired in the WAL
	Recovery txn.RecoveryReport // what start-up's recovery resolved
}

// Of returns the parts of n, a *node.Node (any other value panics). Package node sets it
// when it is initialized: nodehook cannot name node's type, since node imports nodehook.
var Of func(n any) Parts
