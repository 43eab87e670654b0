package raftmeta

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kvoffload/kvoffload/third_party/raft"
)

// MaxVoters is the most voters AddMember puts in the configuration; members
// beyond it join as non-voters (they replicate the log but do not vote, so
// quorum latency stays that of five voters however many nodes join).
const MaxVoters = 5

// configRetries bounds how often a membership change is retried after the
// configuration changed under it (raft's prevIndex check).
const configRetries = 3

// Server is one entry of the raft configuration.
type Server struct {
	ID, Address string
	Voter       bool // false: a non-voter
}

// AddMember adds id at raftAddr: as a voter while the configuration has
// fewer than MaxVoters voters (not counting id), otherwise as a non-voter,
// and returns whether it is a voter. Leader only (an error wrapping
// ErrNotLeader otherwise). Idempotent: a server already present with the same
// ID and address is left alone and its current suffrage returned; the same ID
// at a new address is re-added at the new address (a voter stays a voter; a
// non-voter becomes a voter if there is room). The change is committed when
// AddMember returns nil; other errors are those of Propose (ErrIndeterminate:
// it may still commit; calling again is safe).
func (n *Node) AddMember(ctx context.Context, id, raftAddr string) (voter bool, err error) {
	if id == "" || raftAddr == "" {
		return false, fmt.Errorf("%w: add member %q at %q: empty ID or address", ErrInvalidMember, id, raftAddr)
	}
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	err = n.changeConfig(ctx, func(conf raft.Configuration, index uint64) (raft.IndexFuture, error) {
		cur, found := findServer(conf, id)
		if found && string(cur.Address) == raftAddr {
			voter = cur.Suffrage == raft.Voter
			return nil, nil
		}
		voter = found && cur.Suffrage == raft.Voter || countVoters(conf, id) < MaxVoters
		n.log.Info("adding member", "member", id, "addr", raftAddr, "voter", voter, "readd", found)
		if voter {
			return n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), index, n.timeout(ctx)), nil
		}
		return n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), index, n.timeout(ctx)), nil
	})
	if err != nil {
		return false, fmt.Errorf("raftmeta: add member %s at %s: %w", id, raftAddr, err)
	}
	return voter, nil
}

// RemoveMember removes id from the configuration (leader only; no error if
// id is absent). Removing the leader itself makes it step down once the
// change commits. Otherwise non-voters (lowest ID first) are then promoted
// while there are fewer than MaxVoters voters, so removing a voter keeps
// five voters when there are enough members (also when id was already
// absent, so retrying an indeterminate RemoveMember completes it).
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: remove member: empty ID", ErrInvalidMember)
	}
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	err := n.changeConfig(ctx, func(conf raft.Configuration, index uint64) (raft.IndexFuture, error) {
		cur, found := findServer(conf, id)
		if !found {
			return nil, nil
		}
		n.log.Info("removing member", "member", id, "addr", cur.Address, "voter", cur.Suffrage == raft.Voter)
		return n.raft.RemoveServer(raft.ServerID(id), index, n.timeout(ctx)), nil
	})
	if err != nil {
		return fmt.Errorf("raftmeta: remove member %s: %w", id, err)
	}
	if id == n.cfg.NodeID {
		return nil // this node steps down; a later RemoveMember on the new leader promotes
	}
	if err := n.promote(ctx); err != nil {
		return fmt.Errorf("raftmeta: removed member %s, then promoting a non-voter: %w", id, err)
	}
	return nil
}

// promote turns non-voters into voters, lowest ID first, while there are
// fewer than MaxVoters voters.
func (n *Node) promote(ctx context.Context) error {
	for {
		var done bool
		err := n.changeConfig(ctx, func(conf raft.Configuration, index uint64) (raft.IndexFuture, error) {
			var next *raft.Server
			for i, s := range conf.Servers {
				if s.Suffrage == raft.Nonvoter && (next == nil || s.ID < next.ID) {
					next = &conf.Servers[i]
				}
			}
			if next == nil || countVoters(conf, "") >= MaxVoters {
				done = true
				return nil, nil
			}
			n.log.Info("promoting non-voter", "member", next.ID, "addr", next.Address)
			return n.raft.AddVoter(next.ID, next.Address, index, n.timeout(ctx)), nil
		})
		if err != nil || done {
			return err
		}
	}
}

// changeConfig reads the latest configuration on the leader and runs change
// on it; change returns the future of the configuration change it started,
// or nil when there is nothing to do. The change carries the configuration's
// index, so a concurrent change makes raft refuse it; that is retried on the
// new configuration.
func (n *Node) changeConfig(ctx context.Context, change func(raft.Configuration, uint64) (raft.IndexFuture, error)) error {
	for attempt := 0; ; attempt++ {
		if err := n.ready(ctx); err != nil {
			return err
		}
		if !n.IsLeader() {
			return n.classify(raft.ErrNotLeader)
		}
		conf, index, err := n.configuration()
		if err != nil {
			return err
		}
		fut, err := change(conf, index)
		if err != nil || fut == nil {
			return err
		}
		err = n.wait(ctx, fut)
		if err != nil && attempt < configRetries && strings.Contains(err.Error(), "configuration changed since") {
			n.log.Debug("configuration changed concurrently; retrying", "err", err)
			continue
		}
		return err
	}
}

// configuration returns the latest configuration (possibly not yet
// committed) and its log index.
func (n *Node) configuration() (raft.Configuration, uint64, error) {
	if err := n.ready(context.Background()); err != nil {
		return raft.Configuration{}, 0, err
	}
	fut := n.raft.GetConfiguration()
	if err := fut.Error(); err != nil {
		if errors.Is(err, raft.ErrRaftShutdown) {
			return raft.Configuration{}, 0, fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return raft.Configuration{}, 0, fmt.Errorf("raftmeta: configuration: %w", err)
	}
	return fut.Configuration(), fut.Index(), nil
}

func findServer(conf raft.Configuration, id string) (raft.Server, bool) {
	for _, s := range conf.Servers {
		if string(s.ID) == id {
			return s, true
		}
	}
	return raft.Server{}, false
}

// countVoters counts the voters other than except.
func countVoters(conf raft.Configuration, except string) int {
	n := 0
	for _, s := range conf.Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != except {
			n++
		}
	}
	return n
}

// HasServer reports whether id is in the latest configuration known to this node.
func (n *Node) HasServer(id string) (bool, error) {
	outside, _, err := n.Outside(id)
	return !outside && err == nil, err
}

// Outside reports whether id is outside the latest configuration known to this node (removed,
// or never added) and, if so, whether that configuration is committed (its entry at or below
// the commit index): only then can no leader change bring id back, as a later leader may
// lack an uncommitted configuration entry.
func (n *Node) Outside(id string) (outside, committed bool, err error) {
	conf, index, err := n.configuration()
	if err != nil {
		return false, false, err
	}
	if _, ok := findServer(conf, id); ok {
		return false, false, nil
	}
	return true, index <= n.raft.CommitIndex(), nil
}

// Servers returns the latest configuration known to this node (on a
// follower it may lag the leader's), sorted by ID.
func (n *Node) Servers() ([]Server, error) {
	conf, _, err := n.configuration()
	if err != nil {
		return nil, err
	}
	out := make([]Server, 0, len(conf.Servers))
	for _, s := range conf.Servers {
		out = append(out, Server{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	slices.SortFunc(out, func(a, b Server) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// Leader returns the current leader's ID and raft address as this node
// knows them ("" if none is known).
func (n *Node) Leader() (id, raftAddr string) {
	addr, sid := n.raft.LeaderWithID()
	return string(sid), string(addr)
}

// Addr returns the raft address other members dial to reach this node (the
// advertised address; the node ID for an in-memory transport). It is what
// the leader's AddMember needs.
func (n *Node) Addr() string { return string(n.trans.LocalAddr()) }

// State returns raft's state: "Leader", "Follower", "Candidate" or "Shutdown".
func (n *Node) State() string { return n.raft.State().String() }

// TransferLeadership hands leadership to the most up-to-date other voter
// and returns once this node has stepped down, for a graceful shutdown of
// the leader. It is a no-op (nil) when this node is not the leader or there
// is no other voter. raft gives each attempt ElectionTimeout; a timed-out
// attempt is retried while ctx allows, up to three attempts.
func (n *Node) TransferLeadership(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		if err := n.ready(ctx); err != nil {
			return err
		}
		if !n.IsLeader() {
			return nil
		}
		conf, _, err := n.configuration()
		if err != nil {
			return err
		}
		if countVoters(conf, n.cfg.NodeID) == 0 {
			return nil
		}
		n.log.Info("transferring leadership", "attempt", attempt)
		err = n.wait(ctx, n.raft.LeadershipTransfer())
		switch {
		case err == nil, errors.Is(err, ErrNotLeader):
			return nil
		case attempt < 3 && ctx.Err() == nil && n.IsLeader():
			n.log.Warn("leadership transfer failed; retrying", "err", err)
		default:
			return fmt.Errorf("raftmeta: transfer leadership: %w", err)
		}
	}
}

// OnLeader registers fn to run, in its own goroutine, each time this node
// becomes the leader, and once right away if it leads now (as far as the
// watcher has seen), so no term is missed whenever fn is registered. Each fn
// runs once per leadership term. fn should check IsLeader or tolerate
// ErrNotLeader: leadership may already be gone when it runs.
func (n *Node) OnLeader(fn func()) {
	n.leaderMu.Lock()
	n.onLeader = append(n.onLeader, fn)
	leading := n.leading
	n.leaderMu.Unlock()
	if leading {
		go fn()
	}
}

// watchLeadership drains raft's NotifyCh (raft blocks on it) and runs the
// OnLeader hooks on every gain of leadership, until Close.
func (n *Node) watchLeadership() {
	defer n.watching.Done()
	for {
		select {
		case <-n.closed:
			return
		case lead := <-n.notify:
			n.leaderMu.Lock()
			n.leading = lead
			fns := n.onLeader
			n.leaderMu.Unlock()
			n.log.Info("leadership changed", "leader", lead)
			if lead {
				for _, fn := range fns {
					go fn()
				}
			}
		}
	}
}
