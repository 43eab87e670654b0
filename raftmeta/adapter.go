package raftmeta

import (
	"fmt"
	"io"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/third_party/raft"
)

// raftFSM adapts *fsm.FSM to raft.FSM. raft calls Apply, Snapshot and Restore
// from one goroutine; Persist runs concurrently with Apply (fsm.Snapshot is a
// copy, so that is safe).
type raftFSM struct{ f *fsm.FSM }

var (
	_ raft.BatchingFSM = raftFSM{}
	_ raft.FSMSnapshot = fsmSnapshot{}
)

// Apply returns the *fsm.Result, which raft hands to the proposer's future.
// fsm.ApplyCommand panics on an undecodable command: raft must not go on
// with a replica that skipped an entry.
func (a raftFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	return a.f.ApplyCommand(l.Index, l.Data)
}

// ApplyBatch applies the commands of a batch of committed entries through
// fsm.ApplyCommands, which decodes each one ahead of applying it; raft sends a
// batch of up to MaxAppendEntries entries (the whole log, batch by batch, on
// a restart's replay). A configuration entry's response is nil, as in Apply.
func (a raftFSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	index, data := make([]uint64, 0, len(logs)), make([][]byte, 0, len(logs))
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			index, data = append(index, l.Index), append(data, l.Data)
		}
	}
	res := a.f.ApplyCommands(index, data)
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			out[i], res = res[0], res[1:]
		}
	}
	return out
}

func (a raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	return fsmSnapshot{s: a.f.Snapshot()}, nil
}

func (a raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := a.f.Restore(rc); err != nil {
		return fmt.Errorf("raftmeta: restore: %w", err)
	}
	return nil
}

type fsmSnapshot struct{ s *fsm.Snapshot }

// Persist writes the snapshot and closes the sink (FileSnapshotStore fsyncs
// and renames it into place on Close); on error it cancels the sink.
func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	_ = failpoint.Hit(failpoint.SnapshotPersist)
	if _, err := s.s.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("raftmeta: persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("raftmeta: close snapshot: %w", err)
	}
	return nil
}

func (fsmSnapshot) Release() {}
