package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/raftmeta"
	"github.com/kvoffload/kvoffload/txn"
)

// clusterMeta is a member's txn.Meta as internal/forward's clusterMeta is a node's: reads
// of the local FSM, and proposals, barriers and read indexes run on the leader the member's
// Raft names, then waited for locally (WaitApplied). A call to another member crosses the
// simulated network (network.call) instead of gRPC: a lost request or reply, a cut link or a
// leader that is down makes a proposal indeterminate (raftmeta.ErrIndeterminate), as a
// failed forwarded call is in internal/forward; no leader known is errNoLeader, which the
// coordinator retries within its CommitTimeout. Barrier and ReadIndex wait for a leader.
type clusterMeta struct {
	m *member
	f *fsm.FSM // the life's FSM
}

func (cm clusterMeta) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	l, err := cm.m.leader()
	if err != nil {
		return nil, err
	}
	var res *fsm.Result
	err = cm.m.c.nw.call(cm.m.i, l.i, func() error {
		node, _ := l.live()
		if node == nil {
			return errUnreachable
		}
		res, err = node.Propose(ctx, cmd)
		return err
	})
	switch {
	case errors.Is(err, raftmeta.ErrNotLeader):
		return nil, err
	case err != nil && l != cm.m:
		return nil, fmt.Errorf("%w: forwarded proposal to %s: %w", raftmeta.ErrIndeterminate, l.id, err)
	case err != nil:
		return nil, err
	}
	if err := cm.waitApplied(ctx, res.Index); err != nil {
		return nil, fmt.Errorf("%w: %w", raftmeta.ErrIndeterminate, err)
	}
	return res, nil
}

func (cm clusterMeta) Barrier(ctx context.Context) error {
	return cm.onLeader(ctx, func(node *raftmeta.Node) (uint64, error) {
		if err := node.Barrier(ctx); err != nil {
			return 0, err
		}
		return node.AppliedIndex(), nil
	})
}

func (cm clusterMeta) ReadIndex(ctx context.Context) error {
	return cm.onLeader(ctx, func(node *raftmeta.Node) (uint64, error) { return node.ReadIndex(ctx) })
}

// onLeader runs fetch on the leader (waiting for one, and retrying while the leader
// changes or the network loses the call), then waits until m has applied the index it
// returns.
func (cm clusterMeta) onLeader(ctx context.Context, fetch func(*raftmeta.Node) (uint64, error)) error {
	for {
		l, err := cm.m.leader()
		if errors.Is(err, raftmeta.ErrClosed) {
			return err
		}
		var index uint64
		if err == nil {
			err = cm.m.c.nw.call(cm.m.i, l.i, func() error {
				node, _ := l.live()
				if node == nil {
					return errUnreachable
				}
				index, err = fetch(node)
				return err
			})
		}
		if err == nil {
			return cm.waitApplied(ctx, index)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sim: on the leader: %w (last: %w)", ctx.Err(), err)
		case <-time.After(leaderRetry):
		}
	}
}

// leaderRetry is the pause before a barrier or read index is tried again.
const leaderRetry = 20 * time.Millisecond

func (cm clusterMeta) waitApplied(ctx context.Context, index uint64) error {
	node, _ := cm.m.live()
	if node == nil {
		return raftmeta.ErrClosed
	}
	return node.WaitApplied(ctx, index)
}

func (cm clusterMeta) Lookup(key string) (fsm.Entry, bool)        { return cm.f.Lookup(key) }
func (cm clusterMeta) Generation(key string) uint64               { return cm.f.Generation(key) }
func (cm clusterMeta) TxnResult(id fsm.TxnID) (*fsm.Result, bool) { return cm.f.TxnResult(id) }
func (cm clusterMeta) LiveOf(owner string) []fsm.Entry            { return cm.f.LiveOf(owner) }

// remote is a member's txn.Remote: the owner's coordinator reads its own keys
// (BatchGetLocal), across the network; an owner down or unreachable answers Unavailable.
type remote struct{ m *member }

func (r remote) ReadRemote(ctx context.Context, owner string, keys []string, _ int64) []kvoffload.GetResult {
	var res []kvoffload.GetResult
	var o *member
	for _, x := range r.m.c.ms {
		if x.id == owner {
			o = x
		}
	}
	err := errUnreachable
	if o != nil {
		err = r.m.c.nw.call(r.m.i, o.i, func() error {
			// An owner serves another member's read only once it is ready, as node's
			// ReadLocal waits for Ready: until its recovery has caught its FSM up, its
			// metadata can name extents its disk already freed in an earlier life.
			coord := o.ready()
			if coord == nil {
				return errUnreachable
			}
			var err error
			res, err = coord.BatchGetLocal(ctx, keys, nil)
			if o.d.powerOff() {
				// The owner's power failed during the read: its answer never leaves it.
				return errUnreachable
			}
			return err
		})
	}
	if err != nil || len(res) != len(keys) {
		res = make([]kvoffload.GetResult, len(keys))
		for i, k := range keys {
			res[i] = kvoffload.GetResult{Key: k, Status: kvoffload.Unavailable, Reason: fmt.Sprintf("owner %s: %v", owner, err)}
		}
	}
	return res
}

var (
	_ txn.Meta   = clusterMeta{}
	_ txn.Remote = remote{}
)
