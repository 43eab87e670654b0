package raftmeta

import (
	"errors"
	"fmt"

	"github.com/kvoffload/kvoffload/third_party/raft"
)

// LogCommands calls fn with the data of every command entry in this node's log, oldest
// first, until fn returns false. It reads the log store directly, not through raft: for
// start-up decisions made before the log is applied (the entries after the last snapshot;
// the snapshot itself is already restored into the FSM). At most TrailingLogs +
// SnapshotThreshold entries are read.
func (n *Node) LogCommands(fn func(data []byte) bool) error {
	first, err := n.logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("raftmeta: reading the log: %w", err)
	}
	last, err := n.logs.LastIndex()
	if err != nil {
		return fmt.Errorf("raftmeta: reading the log: %w", err)
	}
	for i := max(first, 1); i <= last; i++ {
		var l raft.Log
		if err := n.logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return fmt.Errorf("raftmeta: reading log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand && !fn(l.Data) {
			return nil
		}
	}
	return nil
}

// HasState reports whether this node has Raft state (a log entry or a snapshot).
func (n *Node) HasState() bool {
	last, err := n.logs.LastIndex()
	return err == nil && last > 0 || n.raft.LastIndex() > 0
}
