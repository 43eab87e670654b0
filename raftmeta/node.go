package raftmeta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/hashicorp/go-hclog"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/third_party/raft"
)

const (
	logCacheSize     = 512
	tcpMaxPool       = 3
	tcpTimeout       = 10 * time.Second
	boltOpenTimeout  = 2 * time.Second // a second process on the same Dir fails instead of hanging
	leaderPollPeriod = 10 * time.Millisecond
	notifyBuffer     = 16 // raft blocks on NotifyCh; watchLeadership drains it promptly
)

// Node is one running raft member holding an fsm.FSM.
type Node struct {
	cfg   Config
	log   *slog.Logger
	fsm   *fsm.FSM
	raft  *raft.Raft
	store *raftboltdb.BoltStore
	logs  raft.LogStore // the cached log store raft uses
	fault *logFault     // the first error writing raft.db
	// opened is closed once open has returned: raft is set then, or never.
	opened chan struct{}
	trans  raft.Transport
	// stream is trans's stream layer (TLS or the cluster-ID handshake); nil otherwise. With
	// TLS it checks a dialed server's certificate against the Raft configuration.
	stream *streamLayer

	notify   chan bool      // raft's NotifyCh: leadership gained (true) or lost (false)
	watching sync.WaitGroup // watchLeadership
	leaderMu sync.Mutex     // guards leading and onLeader
	leading  bool           // the last leadership value watchLeadership saw
	onLeader []func()       // OnLeader hooks, only appended to
	memberMu sync.Mutex     // serializes AddMember and RemoveMember on this node

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
}

// Open starts raft on cfg.Dir around f. f must be fresh (fsm.New()): raft
// restores it from the newest snapshot and re-applies the committed log after
// it once the commit index is known (after the leader's first entry of its
// term), so until WaitLeader+Barrier the FSM may be stale.
func Open(cfg Config, f *fsm.FSM) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = cfg.Logger.With("node", cfg.NodeID) // raft's records and raftmeta's name the node once
	n := &Node{cfg: cfg, fsm: f, closed: make(chan struct{}), opened: make(chan struct{}), log: cfg.Logger, notify: make(chan bool, notifyBuffer)}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	n.log = n.log.With("component", "raftmeta")
	if err := n.open(); err != nil {
		n.closeStores()
		return nil, err
	}
	return n, nil
}

func (n *Node) open() error {
	defer close(n.opened)
	cfg := n.cfg
	logs, stable, snaps, err := n.openStores()
	if err != nil {
		return err
	}
	rc := cfg.raftConfig(cfg.Logger)
	rc.NotifyCh = n.notify
	if cfg.Bootstrap {
		if err := bootstrap(rc, logs, stable, snaps, n.trans); err != nil {
			return err
		}
	}
	n.raft, err = raft.NewRaft(rc, raftFSM{n.fsm}, logs, stable, snaps, n.trans)
	if err != nil {
		return fmt.Errorf("raftmeta: start raft: %w", err)
	}
	if n.stream != nil {
		n.stream.raft.Store(n.raft)
	}
	n.watching.Add(1)
	go n.watchLeadership()
	n.log.Info("raft started", "dir", cfg.Dir, "addr", n.trans.LocalAddr(), "bootstrap", cfg.Bootstrap,
		"fsm_applied", n.fsm.AppliedIndex())
	return nil
}

// openStores opens Raft's stores and transport: the supplied ones (Config.Stores), or
// raft.db and the file snapshot store on Dir and the transport BindAddr says.
func (n *Node) openStores() (raft.LogStore, raft.StableStore, raft.SnapshotStore, error) {
	if n.cfg.Stores != nil {
		return n.openSupplied()
	}
	cfg := n.cfg
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, nil, nil, fmt.Errorf("raftmeta: %w", err)
	}
	var err error
	n.store, err = raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.Dir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: boltOpenTimeout},
		NoSync:      false, // term, vote and log entries are fsynced before raft acts on them
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("raftmeta: open raft.db: %w", err)
	}
	n.fault = &logFault{onFault: n.onLogFault}
	stable := faultStable{n.store, n.fault}
	logs, err := raft.NewLogCache(logCacheSize, boltLogs{n.store, n.fault})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("raftmeta: log cache: %w", err)
	}
	n.logs = logs
	hl := newHCLogger(cfg.Logger, "raft")
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, cfg.SnapshotRetain, hl.Named("snapshots"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("raftmeta: snapshot store: %w", err)
	}
	if n.trans, n.stream, err = newTransport(cfg, hl); err != nil {
		return nil, nil, nil, err
	}
	return logs, stable, snaps, nil
}

// onLogFault tells the owner of the first error writing raft.db (Config.OnLogFault), then
// stops Raft: in that order, so that once Raft is seen stopped the owner refuses calls
// already, and none is proposed to a stopped Raft.
func (n *Node) onLogFault(err error) {
	n.log.Error("the Raft log cannot be written: Raft stopped; this member fail-stops", "err", err)
	if n.cfg.OnLogFault != nil {
		n.cfg.OnLogFault(err)
	}
	<-n.opened // a fault while NewRaft is still returning
	if n.raft != nil {
		if err := n.raft.Shutdown().Error(); err != nil {
			n.log.Warn("stopping Raft after a log fault", "err", err)
		}
	}
}

// LogFault returns the first error writing raft.db (wrapping ErrLogWrite; it says so when
// the filesystem is full), or nil. After one, Raft is stopped and the member must restart.
func (n *Node) LogFault() error { return n.fault.get() }

// newTransport returns an in-memory transport (BindAddr "") addressed by the
// node ID, or a TCP transport listening on BindAddr and advertising
// AdvertiseAddr (resolved here) or, without one, the bound address.
func newTransport(cfg Config, hl hclog.Logger) (raft.Transport, *streamLayer, error) {
	if cfg.BindAddr == "" {
		_, t := raft.NewInmemTransport(raft.ServerAddress(cfg.NodeID))
		return t, nil, nil
	}
	var advertise net.Addr
	if cfg.AdvertiseAddr != "" {
		a, err := net.ResolveTCPAddr("tcp", cfg.AdvertiseAddr)
		if err != nil {
			return nil, nil, fmt.Errorf("raftmeta: AdvertiseAddr: %w", err)
		}
		advertise = a
	}
	if cfg.TLS != nil || cfg.ClusterID != nil {
		t, s, err := newStreamTransport(cfg, advertise, &raft.NetworkTransportConfig{
			MaxPool: tcpMaxPool, Timeout: tcpTimeout, Logger: hl.Named("transport")})
		if err != nil {
			// A nil *NetworkTransport in the interface would not be nil, and closeStores
			// would call Close on it: a taken Raft port must fail Open, not panic it
			// (node's TestRaftPortTakenIsAnError).
			return nil, nil, err
		}
		return t, s, nil
	}
	t, err := raft.NewTCPTransportWithLogger(cfg.BindAddr, advertise, tcpMaxPool, tcpTimeout, hl.Named("transport"))
	if err != nil {
		return nil, nil, fmt.Errorf("raftmeta: transport on %s: %w", cfg.BindAddr, err)
	}
	return t, nil, nil
}

// bootstrap writes a one-voter configuration if there is no raft state yet.
// The voter's address is trans.LocalAddr(): the advertised address for TCP.
func bootstrap(rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport) error {
	has, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return fmt.Errorf("raftmeta: checking for raft state: %w", err)
	}
	if has {
		return nil
	}
	conf := raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter, ID: rc.LocalID, Address: trans.LocalAddr(),
	}}}
	if err := raft.BootstrapCluster(rc, logs, stable, snaps, trans, conf); err != nil {
		return fmt.Errorf("raftmeta: bootstrap: %w", err)
	}
	return nil
}

// WaitLeader blocks until this node is the leader or knows a leader, or ctx
// ends (its error is returned, wrapped), or its Raft log cannot be written (LogFault's
// error: Raft has stopped, so no leader will be known).
func (n *Node) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(leaderPollPeriod)
	defer t.Stop()
	for {
		if addr, _ := n.raft.LeaderWithID(); addr != "" {
			return nil
		}
		if err := n.LogFault(); err != nil {
			return err // Raft is stopped: no leader will ever be known here
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("raftmeta: waiting for a leader: %w", ctx.Err())
		case <-n.closed:
			return ErrClosed
		case <-t.C:
		}
	}
}

// Propose appends cmd (an fsm-encoded command) through raft on the leader,
// waits until it is applied, and returns the FSM's Result. Errors:
//   - ErrInvalidCommand, ErrClosed, ErrNotLeader, a ctx error before sending:
//     the command was not appended;
//   - ErrIndeterminate (leadership lost, timeout, shutdown, ctx ended while
//     waiting): it may still commit. Retrying with the same TxnID is safe.
func (n *Node) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	if _, _, err := fsm.Decode(cmd); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCommand, err)
	}
	if err := n.ready(ctx); err != nil {
		return nil, err
	}
	fut := n.raft.Apply(cmd, n.timeout(ctx))
	if err := n.wait(ctx, fut); err != nil {
		return nil, fmt.Errorf("raftmeta: propose: %w", err)
	}
	res, ok := fut.Response().(*fsm.Result)
	if !ok {
		return nil, fmt.Errorf("raftmeta: propose: FSM returned %T, want *fsm.Result", fut.Response())
	}
	return res, nil
}

// Barrier waits until the FSM has applied every entry committed before it
// (leader only; ErrNotLeader otherwise).
func (n *Node) Barrier(ctx context.Context) error {
	if err := n.ready(ctx); err != nil {
		return err
	}
	if err := n.wait(ctx, n.raft.Barrier(n.timeout(ctx))); err != nil {
		return fmt.Errorf("raftmeta: barrier: %w", err)
	}
	return nil
}

// ReadIndex returns an index that every entry acknowledged before the call is at or
// below (leader only; ErrNotLeader otherwise): a replica whose FSM has applied it
// (WaitApplied) reflects them. It costs heartbeat rounds to a quorum and no log write,
// unlike Barrier. The argument (Raft thesis §6.4, "read index"): the leader reads its last
// index, then confirms that a quorum still follows it in the same term, so no newer term
// existed when the read began, and by Leader Completeness every entry committed before
// then is in this leader's log at or below that index. Two details of hashicorp/raft:
// VerifyLeader also counts replies to heartbeats sent before it was registered
// (replication.go notifyAll), so a leader resumed after a pause could pass one round on
// stale replies; a second round, registered after the first completed, needs new ones.
// And the last index may include entries not yet committed, which a later leader could
// replace; the index is returned only once it is committed, so a caller never waits for
// entries that will not come.
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	if err := n.ready(ctx); err != nil {
		return 0, err
	}
	if n.raft.State() != raft.Leader {
		return 0, n.classify(raft.ErrNotLeader)
	}
	term, index := n.raft.CurrentTerm(), n.raft.LastIndex()
	for k := 0; k < 2 && !n.soleVoter(); k++ { // a sole voter has no one to confirm with
		if err := n.wait(ctx, n.raft.VerifyLeader()); err != nil {
			return 0, fmt.Errorf("raftmeta: read index: %w", err)
		}
	}
	err := n.poll(ctx, func() (bool, error) {
		if n.raft.CurrentTerm() != term || n.raft.State() != raft.Leader {
			return false, n.classify(raft.ErrNotLeader)
		}
		return n.raft.CommitIndex() >= index, nil
	})
	if err != nil {
		return 0, fmt.Errorf("raftmeta: read index %d: %w", index, err)
	}
	return index, nil
}

// soleVoter reports whether this node is the only voter of the latest configuration (the
// one Raft uses, committed or not). Such a leader stays leader of its term until a voter is
// added, which it would append itself, so a read index needs no VerifyLeader round: that
// round has no one else to ask, but goes through Raft's leader loop, which under a read storm
// on 2 cores took over ReadIndexTimeout (1 s) and made a single node answer keys it does not
// have Unavailable instead of NotFound. TestSoleVoterReadIndex guards it.
func (n *Node) soleVoter() bool {
	voters, self := 0, false
	for _, s := range n.raft.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
			self = self || string(s.ID) == n.cfg.NodeID
		}
	}
	return voters == 1 && self
}

// WaitApplied returns once the FSM has applied every command at or below index (raft's
// index space), or ctx ends. raft's own AppliedIndex is not enough: raft advances it when it
// hands entries to the FSM goroutine's queue, before the FSM has applied them (raft.go
// processLogs), so a reader that trusted it could miss an acknowledged command.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	err := n.pollWake(ctx, n.fsm.Advanced, func() (bool, error) { return n.fsmReached(index), nil })
	if err != nil {
		return fmt.Errorf("raftmeta: waiting to apply index %d (raft applied %d, FSM %d): %w",
			index, n.raft.AppliedIndex(), n.fsm.AppliedIndex(), err)
	}
	return nil
}

// poll calls done, backing off from 100 µs to 5 ms between calls, until it reports true or
// an error, ctx ends, or the node closes (ErrClosed).
func (n *Node) poll(ctx context.Context, done func() (bool, error)) error {
	return n.pollWake(ctx, nil, done)
}

// pollWake is poll that also calls done again as soon as the channel wake returns (taken
// before each call of done) is closed: done's answer changes mostly on an FSM apply
// (fsm.FSM.Advanced), and the backoff only covers what does not signal (entries that never
// reach the FSM). wake nil: the backoff alone.
func (n *Node) pollWake(ctx context.Context, wake func() <-chan struct{}, done func() (bool, error)) error {
	delay := backoff.ExponentialBackOff{InitialInterval: 100 * time.Microsecond, Multiplier: 2, MaxInterval: 5 * time.Millisecond}
	for {
		var woken <-chan struct{} // nil: never ready
		if wake != nil {
			woken = wake()
		}
		if ok, err := done(); ok || err != nil {
			return err
		}
		t := time.NewTimer(delay.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-n.closed:
			t.Stop()
			return ErrClosed
		case <-woken:
			t.Stop()
		case <-t.C:
		}
	}
}

// fsmReached reports whether the FSM has applied every command entry at or below index.
// The FSM records the index of the last command it applied; the entries between that and
// index, once raft has handed them all over, need the FSM only if they are commands (no-op,
// barrier and configuration entries never reach fsm.FSM). Entries at or below raft's last
// snapshot were applied before it was taken or restored with it (a follower that installed
// a snapshot may keep older, uncommitted entries there, which must not be waited for).
func (n *Node) fsmReached(index uint64) bool {
	if n.raft.AppliedIndex() < index {
		return false
	}
	floor := n.fsm.HookedIndex() // applied, and its hooks have run (the coordinator's view)
	for i := index; i > floor; i-- {
		var l raft.Log
		if err := n.logs.GetLog(i, &l); errors.Is(err, raft.ErrLogNotFound) {
			return true // compacted: covered by the snapshot
		} else if err != nil {
			return false // unreadable now: look again later
		}
		if l.Type == raft.LogCommand {
			return n.fsm.AppliedIndex() >= i
		}
		if i == index { // a rare non-command entry: from here on, stop at the snapshot too
			floor = max(floor, n.lastSnapshotIndex())
		}
	}
	return true
}

// lastSnapshotIndex is the index of raft's newest snapshot (0 if none or unknown).
func (n *Node) lastSnapshotIndex() uint64 {
	v, err := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// ready reports why a request must not be sent at all.
func (n *Node) ready(ctx context.Context) error {
	select {
	case <-n.closed:
		return ErrClosed
	default:
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("raftmeta: %w", err)
	}
	return nil
}

// timeout is ApplyTimeout or the time left before ctx's deadline, if sooner.
func (n *Node) timeout(ctx context.Context) time.Duration {
	d := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = max(min(d, time.Until(dl)), time.Millisecond)
	}
	return d
}

// wait waits for fut or ctx and classifies the outcome. raft resolves every
// future eventually (applied, failed, or ErrRaftShutdown), so the goroutine
// left behind when ctx ends first does finish.
func (n *Node) wait(ctx context.Context, fut raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- fut.Error() }()
	select {
	case err := <-done:
		return n.classify(err)
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrIndeterminate, ctx.Err())
	}
}

// classify maps raft's errors onto our sentinels. Unknown errors count as
// indeterminate: claiming a definite failure we cannot prove would be worse.
func (n *Node) classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		addr, id := n.raft.LeaderWithID()
		return fmt.Errorf("%w (leader %q at %q)", ErrNotLeader, id, addr)
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrAbortedByRestore):
		return err // definite: the entry was truncated away by a snapshot install
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w: %w", ErrIndeterminate, ErrClosed, err)
	default: // ErrLeadershipLost, ErrEnqueueTimeout, transport errors
		return fmt.Errorf("%w: %w", ErrIndeterminate, err)
	}
}

// Snapshot asks raft for a snapshot now (it also truncates the log to
// TrailingLogs). raft.ErrNothingNewToSnapshot is returned wrapped.
func (n *Node) Snapshot() error {
	if err := n.ready(context.Background()); err != nil {
		return err
	}
	if err := n.raft.Snapshot().Error(); err != nil {
		return fmt.Errorf("raftmeta: snapshot: %w", err)
	}
	return nil
}

// AppliedIndex is raft's last applied index (it counts configuration and
// no-op entries too, so it may exceed the FSM's AppliedIndex).
func (n *Node) AppliedIndex() uint64 { return n.raft.AppliedIndex() }

// IsLeader reports whether this node is the leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Raft exposes the underlying raft for observers and tests. Membership
// changes go through AddMember and RemoveMember (they keep MaxVoters).
func (n *Node) Raft() *raft.Raft { return n.raft }

// Close shuts raft down (pending proposals fail with ErrIndeterminate), then
// closes the transport and raft.db. Safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		close(n.closed)
		var errs []error
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raftmeta: shutdown: %w", err))
		}
		n.watching.Wait()
		errs = append(errs, n.closeStores())
		n.closeErr = errors.Join(errs...)
		n.log.Info("raft closed")
	})
	return n.closeErr
}

// closeStores closes whatever open() managed to open.
func (n *Node) closeStores() error {
	var errs []error
	if c, ok := n.trans.(interface{ Close() error }); ok {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftmeta: close transport: %w", err))
		}
	}
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftmeta: close raft.db: %w", err))
		}
	}
	return errors.Join(errs...)
}
