package raftmeta

import (
	"errors"
	"fmt"

	"github.com/kvoffload/kvoffload/third_party/raft"
)

// Stores are Raft's stores and transport supplied by the caller (Config.Stores) instead of
// the ones Open makes on Config.Dir: a simulator's in-memory log that survives a simulated
// power loss as far as it was acknowledged, and a transport over a simulated network.
//
// Every field is required. Open wraps Log and Stable so that their first write error is a
// log fault as raft.db's is (ErrLogWrite, Config.OnLogFault, Raft stopped), and caches Log
// as it caches raft.db. Open takes the transport over: Close closes it (when it has a
// Close method). The stores stay the caller's: a member reopened on the same Log, Stable
// and Snapshots starts from the state they hold, as one reopened on the same Dir does.
type Stores struct {
	Log       raft.LogStore      // entries; a write must be durable when it returns
	Stable    raft.StableStore   // current term and vote; likewise
	Snapshots raft.SnapshotStore // the FSM's snapshots
	Transport raft.Transport     // how this member reaches the others; LocalAddr is its address
}

// check reports each missing field, wrapped in ErrInvalidConfig by bad.
func (s *Stores) check(bad func(format string, args ...any)) {
	for _, f := range []struct {
		name string
		nil  bool
	}{
		{"Log", s.Log == nil}, {"Stable", s.Stable == nil}, {"Snapshots", s.Snapshots == nil},
		{"Transport", s.Transport == nil},
	} {
		if f.nil {
			bad("Stores.%s is nil", f.name)
		}
	}
}

// faultLogs is a supplied log store whose write errors are log faults.
type faultLogs struct {
	raft.LogStore
	fault *logFault
}

func (l faultLogs) StoreLog(e *raft.Log) error { return l.fault.record(l.LogStore.StoreLog(e)) }

func (l faultLogs) StoreLogs(es []*raft.Log) error {
	return l.fault.record(l.LogStore.StoreLogs(es))
}

func (l faultLogs) DeleteRange(lo, hi uint64) error {
	return l.fault.record(l.LogStore.DeleteRange(lo, hi))
}

// faultStable is a stable store (supplied, or raft.db's) whose write errors are log faults.
type faultStable struct {
	raft.StableStore
	fault *logFault
}

var (
	_ raft.LogStore    = faultLogs{}
	_ raft.StableStore = faultStable{}
)

func (s faultStable) Set(k, v []byte) error { return s.fault.record(s.StableStore.Set(k, v)) }

func (s faultStable) SetUint64(k []byte, v uint64) error {
	return s.fault.record(s.StableStore.SetUint64(k, v))
}

// openSupplied sets n's stores and transport from cfg.Stores; it returns Raft's log,
// stable and snapshot stores.
func (n *Node) openSupplied() (raft.LogStore, raft.StableStore, raft.SnapshotStore, error) {
	s := n.cfg.Stores
	n.fault = &logFault{onFault: n.onLogFault}
	logs, err := raft.NewLogCache(logCacheSize, faultLogs{s.Log, n.fault})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("raftmeta: log cache: %w", err)
	}
	n.logs, n.trans = logs, s.Transport
	return logs, faultStable{s.Stable, n.fault}, s.Snapshots, nil
}

// errStoresWithAddr: a supplied transport has its own addresses.
var errStoresWithAddr = errors.New("Stores with a BindAddr (the supplied Transport has its own address)")
