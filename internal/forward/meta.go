package forward

import (
	"context"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/raftmeta"
	"github.com/kvoffload/kvoffload/txn"
)

// Meta is a node's metadata as its coordinator sees it (txn.Meta): reads of the local FSM f,
// and proposals, barriers and read indexes through r, the node's Raft; through leader when
// it is not nil (a cluster member, which forwards them when it does not lead).
func Meta(r *raftmeta.Node, f *fsm.FSM, leader *Leader) txn.Meta {
	if leader == nil {
		return meta{r, f}
	}
	return clusterMeta{meta: meta{r, f}, leader: leader}
}

// meta joins the Raft proposer and the local FSM into txn.Meta.
type meta struct {
	r *raftmeta.Node
	f *fsm.FSM
}

func (m meta) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	return m.r.Propose(ctx, cmd)
}
func (m meta) Barrier(ctx context.Context) error   { return m.r.Barrier(ctx) }
func (m meta) ReadIndex(context.Context) error     { return nil } // the only replica
func (m meta) Lookup(key string) (fsm.Entry, bool) { return m.f.Lookup(key) }
func (m meta) Generation(key string) uint64        { return m.f.Generation(key) }
func (m meta) LookupEach(n int, key func(int) string, fn func(int, fsm.Entry, bool, uint64)) {
	m.f.LookupEach(n, key, fn)
}
func (m meta) TxnResult(id fsm.TxnID) (*fsm.Result, bool) { return m.f.TxnResult(id) }
func (m meta) LiveOf(owner string) []fsm.Entry            { return m.f.LiveOf(owner) }

// clusterMeta is txn.Meta for a cluster member: local FSM reads, and proposals, barriers
// and read indexes forwarded to the leader when this node is not it.
type clusterMeta struct {
	meta
	leader *Leader
}

func (m clusterMeta) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	return m.leader.Propose(ctx, cmd)
}
func (m clusterMeta) Barrier(ctx context.Context) error   { return m.leader.Barrier(ctx) }
func (m clusterMeta) ReadIndex(ctx context.Context) error { return m.leader.ReadIndex(ctx) }
