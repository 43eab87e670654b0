package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/txn/txntest"
	"github.com/kvoffload/kvoffload/vfs/errorfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
	"github.com/kvoffload/kvoffload/wal"
)

// The world's layout and sizes: small, so that buckets fill, WAL segments rotate and the
// WAL is truncated within a few dozen operations.
const (
	bucketDir      = "/data/buckets"
	walDir         = "/data/wal"
	bucketSize     = 256 << 10
	segmentSize    = 4 << 10
	truncateEvery  = 16
	simNodeID      = "n1"
	proposeTimeout = time.Second
)

// world is one life of the node: from an open (a recovery) to a power loss or a clean stop.
type world struct {
	// ctx ends when the power fails, as the process would: nothing waits on a dead disk.
	ctx    context.Context
	cancel context.CancelFunc
	disk   *disk
	f      *fsm.FSM
	meta   *meta
	data   *bucketstore.Store
	log    *wal.Log
	coord  *txn.Coordinator
}

// meta is the single node's Raft: a Propose appends to the disk's Raft log (a persistence
// point) and applies the command to the FSM, in log order. Its reads are txntest.Meta's.
type meta struct {
	*txntest.Meta
	disk    *disk
	applyMu sync.Mutex // one append-and-apply at a time: the FSM applies in log order
}

func (m *meta) Propose(_ context.Context, cmd []byte) (*fsm.Result, error) {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	index, lost, err := m.disk.raftAppend(cmd)
	if err != nil {
		// The process is dead: the coordinator must not retry (txn.ErrRefused still ends the
		// batch indeterminate).
		return nil, fmt.Errorf("%w: %w", txn.ErrRefused, err)
	}
	res := m.FSM.ApplyCommand(index, cmd)
	if lost {
		return nil, errAnswerLost
	}
	return res, nil
}

// errAnswerLost is a Propose whose command committed but whose answer was lost.
var errAnswerLost = errors.New("sim: leadership lost after the entry committed")

// TxnResult sometimes answers as a member whose FSM has not applied the transaction yet
// would, so that a retried batch is proposed again and the FSM's de-duplication by txn ID
// decides (a client that retries on another member meets this).
func (m *meta) TxnResult(id fsm.TxnID) (*fsm.Result, bool) {
	if m.disk.lagging() {
		return nil, false
	}
	return m.Meta.TxnResult(id)
}

// openWorld recovers a node from fs and the Raft log, as a restart after a power loss: the
// stores open (the WAL repairs its tail), the log is applied to a fresh FSM, and the
// coordinator resolves every intent. d's power may fail during it (errPowerOff).
func openWorld(ctx context.Context, d *disk) (w *world, err error) {
	w = &world{disk: d, f: fsm.New()}
	w.ctx, w.cancel = context.WithCancel(ctx)
	d.mu.Lock()
	d.onOff = w.cancel
	d.mu.Unlock()
	w.meta = &meta{Meta: &txntest.Meta{FSM: w.f}, disk: d}
	fs := errorfs.WrapHooks(d.mem, d.inject, d.hooks())
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	bcfg := bucketstore.DefaultConfig(bucketDir)
	bcfg.FS, bcfg.BucketSize = fs, bucketSize
	if w.data, err = bucketstore.Open(bcfg); err != nil {
		return w, fmt.Errorf("open buckets: %w", err)
	}
	if w.log, _, err = wal.Open(wal.Config{Dir: walDir, FS: fs, SegmentSize: segmentSize}); err != nil {
		return w, fmt.Errorf("open WAL: %w", err)
	}
	tcfg := txn.DefaultConfig(simNodeID)
	tcfg.TruncateEvery, tcfg.CommitTimeout = truncateEvery, proposeTimeout
	if w.coord, err = txn.New(tcfg, w.log, w.data, w.meta); err != nil {
		return w, fmt.Errorf("new coordinator: %w", err)
	}
	w.f.Watch(w.coord.OnApplied)
	w.f.WatchRestore(w.coord.OnRestored)
	d.mu.Lock()
	log := d.log
	d.mu.Unlock()
	for i, cmd := range log { // Raft applies the committed log after a restart
		w.f.ApplyCommand(uint64(i+1), cmd)
	}
	if _, err = w.coord.Recover(w.ctx); err != nil {
		return w, fmt.Errorf("recover: %w", err)
	}
	d.mu.Lock()
	d.phase = "run"
	d.mu.Unlock()
	return w, nil
}

// close stops the world; with the power off its errors are expected and dropped.
func (w *world) close() error {
	defer w.cancel()
	var errs []error
	if w.coord != nil {
		errs = append(errs, w.coord.Close())
	}
	if w.log != nil {
		errs = append(errs, w.log.Close())
	}
	if w.data != nil {
		errs = append(errs, w.data.Close())
	}
	return errors.Join(errs...)
}

// newDisk is the disk of a world that starts on mem with the Raft log and model of the
// last, failing its power at the crashAt-th persistence point (0: never).
func newDisk(mem *memfs.FS, log [][]byte, m *model, crashAt int, s *sim) *disk {
	return &disk{mem: mem, log: log, model: m, crashAt: crashAt, rng: s.crashRng,
		phase: "recovery", focus: s.opt.Focus, seen: map[string]int{}, faults: map[string]int{}, trace: s.trace,
		readKeys: map[string]string{}, readFaults: map[string]string{}}
}
