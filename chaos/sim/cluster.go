package sim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/raftmeta"
	"github.com/kvoffload/kvoffload/third_party/raft"
	"github.com/kvoffload/kvoffload/txn"
	"github.com/kvoffload/kvoffload/vfs/errorfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
	"github.com/kvoffload/kvoffload/wal"
)

// A cluster world: N members in one process, each the write path of a node (coordinator,
// intent WAL and bucket store on its own simulated disk, FSM) around the real raftmeta.Node,
// on Raft stores that survive the member's power losses (raftDisk) and the simulated
// network (network.go). One client drives them (clusterdrive.go).

// Raft timing of a cluster world (virtual time): raftmeta's defaults, with snapshots often
// and a short log so that a member that was down or cut off catches up by InstallSnapshot.
const (
	clusterSnapshotEvery = time.Second
	clusterSnapshotAfter = 48
	clusterTrailingLogs  = 24
	recoverTimeout       = 10 * time.Second // a member's recovery gives up after this
)

// cluster is one seed's cluster: its members, network, client model and the ledger of
// applied results.
type cluster struct {
	s      *sim
	ms     []*member
	nw     *network
	ledger *ledger
	// mu guards model: what the client was told, cluster-wide.
	mu    sync.Mutex
	model *model
	calm  bool // the end of the world: no new life loses power, no Raft append fails
}

// member is one node of the cluster. Its Raft stores and its disk image outlive its lives;
// the rest is one life, from an open to a power loss, a fail-stop or the end.
type member struct {
	c     *cluster
	i     int
	id    string
	logs  *raft.InmemStore // log, term and vote: kept as far as each write returned
	snaps *raft.InmemSnapshotStore
	mem   *memfs.FS  // the disk the next life opens
	rng   *rand.Rand // this member's disk's choices (crash points, modes, faults)

	mu sync.RWMutex // guards the life's fields for the other members' calls
	up bool         // opened and not yet closed
	// recovered: this life's recovery succeeded (its coordinator serves)
	recovered bool
	life      int // the network's number of this life
	d         *disk
	ctx       context.Context // ends when the power fails
	stop      context.CancelFunc
	f         *fsm.FSM
	node      *raftmeta.Node
	data      *bucketstore.Store
	log       *wal.Log
	coord     *txn.Coordinator
}

// raftDisk is a member's Raft log and stable store: raft.InmemStore, every write a
// persistence point of the member's disk. raft-boltdb fsyncs a write before it returns, so
// the store as it stands when the power fails is what the disk keeps. Once the power is
// off a write is dropped and reports success: the process is dead, and nothing it does
// reaches its disk, the network (it is down), the client or the ledger (Raft panics on a
// failed term or vote write, which would end the whole simulation). One log append in
// raftEIOOdds fails with EIO instead (a storage fault: raftmeta's log fault stops Raft and
// the member restarts).
type raftDisk struct {
	*raft.InmemStore
	d    *disk
	calm func() bool
}

// raftEIOOdds: one Raft log append in this many fails with EIO.
const raftEIOOdds = 1024

// write passes one persistence point of kind and reports whether the write is to be stored.
func (r raftDisk) write(kind string) (bool, error) {
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	if err := r.d.pointLocked(kind, "raft", nil); err != nil {
		return false, nil
	}
	if kind == "append" && r.d.rng.IntN(raftEIOOdds) == 0 && !r.calm() {
		r.d.faults["eio-raft-append"]++
		r.d.trace("fault eio-raft-append (point #%d)", r.d.n)
		return false, &fs.PathError{Op: "write", Path: "raft.db", Err: syscall.EIO}
	}
	return true, nil
}

func (r raftDisk) StoreLog(l *raft.Log) error { return r.StoreLogs([]*raft.Log{l}) }

func (r raftDisk) StoreLogs(logs []*raft.Log) error {
	if ok, err := r.write("append"); !ok {
		return err
	}
	return r.InmemStore.StoreLogs(logs)
}

func (r raftDisk) Set(k, v []byte) error {
	if ok, err := r.write("vote"); !ok {
		return err
	}
	return r.InmemStore.Set(k, v)
}

func (r raftDisk) SetUint64(k []byte, v uint64) error {
	if ok, err := r.write("vote"); !ok {
		return err
	}
	return r.InmemStore.SetUint64(k, v)
}

// newCluster makes n members with empty disks and Raft stores, every store bootstrapped
// with the configuration of all n voters.
func newCluster(s *sim, n int) (*cluster, error) {
	c := &cluster{s: s, nw: newNetwork(s.opt.Seed, n), model: newModel(), ledger: newLedger()}
	var conf raft.Configuration
	for i := range n {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(memberAddr(i)), Address: memberAddr(i)})
	}
	for i := range n {
		m := &member{c: c, i: i, id: string(memberAddr(i)), logs: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore(),
			mem: memfs.New(), rng: rand.New(rand.NewPCG(s.opt.Seed, uint64(100+i)))}
		rc := raft.DefaultConfig()
		rc.LocalID = raft.ServerID(m.id)
		_, t := raft.NewInmemTransport(memberAddr(i))
		if err := raft.BootstrapCluster(rc, m.logs, m.logs, m.snaps, t, conf); err != nil {
			return nil, fmt.Errorf("bootstrap %s: %w", m.id, err)
		}
		c.ms = append(c.ms, m)
	}
	return c, nil
}

// start opens a life of m on its disk image and Raft stores, its power failing at the
// crashAt-th persistence point (0: never): the bucket store, the WAL, the coordinator
// (not yet recovered) and Raft. On an error the life is closed again.
func (m *member) start(ctx context.Context, crashAt int) (err error) {
	d := &disk{mem: m.mem, model: newModel(), crashAt: crashAt, rng: m.rng, phase: "recovery",
		seen: map[string]int{}, faults: map[string]int{}, trace: m.c.s.trace}
	m.mu.Lock()
	m.d, m.f, m.recovered = d, fsm.New(), false
	m.ctx, m.stop = context.WithCancel(ctx)
	stop := m.stop
	trans, life := m.c.nw.attach(m.i)
	m.life = life
	d.mu.Lock()
	d.onOff = func() { stop(); m.c.nw.setDown(m.i, life) }
	d.mu.Unlock()
	defer func() {
		if err == nil {
			m.up = true
		}
		m.mu.Unlock()
		if err != nil {
			m.close()
		}
	}()
	disk := errorfs.Wrap(d.mem, d.inject)
	bcfg := bucketstore.DefaultConfig(bucketDir)
	bcfg.FS, bcfg.BucketSize = disk, bucketSize
	if m.data, err = bucketstore.Open(bcfg); err != nil {
		return fmt.Errorf("%s: open buckets: %w", m.id, err)
	}
	if m.log, _, err = wal.Open(wal.Config{Dir: walDir, FS: disk, SegmentSize: segmentSize}); err != nil {
		return fmt.Errorf("%s: open WAL: %w", m.id, err)
	}
	tcfg := txn.DefaultConfig(m.id)
	tcfg.TruncateEvery, tcfg.CommitTimeout = truncateEvery, proposeTimeout
	if m.coord, err = txn.New(tcfg, m.log, m.data, clusterMeta{m, m.f}); err != nil {
		return fmt.Errorf("%s: new coordinator: %w", m.id, err)
	}
	m.coord.SetRemote(remote{m})
	coord, id := m.coord, m.id
	m.f.Watch(func(r *fsm.Result) {
		if !d.powerOff() { // what a dead member applies stays in it
			m.c.ledger.record(id, r)
		}
		coord.OnApplied(r)
	})
	m.f.WatchRestore(coord.OnRestored)
	calm := func() bool { return m.c.calm }
	rcfg := raftmeta.DefaultConfig(m.id, "")
	rcfg.SnapshotInterval, rcfg.SnapshotThreshold, rcfg.TrailingLogs = clusterSnapshotEvery, clusterSnapshotAfter, clusterTrailingLogs
	rcfg.ApplyTimeout = proposeTimeout
	rcfg.Stores = &raftmeta.Stores{Log: raftDisk{m.logs, d, calm}, Stable: raftDisk{m.logs, d, calm}, Snapshots: m.snaps,
		Transport: trans}
	if m.node, err = raftmeta.Open(rcfg, m.f); err != nil {
		return fmt.Errorf("%s: open Raft: %w", m.id, err)
	}
	return nil
}

// recover runs the coordinator's start-up recovery (it needs a leader: its barrier is
// forwarded), bounded by recoverTimeout.
func (m *member) recover() error {
	m.mu.RLock()
	ctx, coord, d := m.ctx, m.coord, m.d
	m.mu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, recoverTimeout)
	defer cancel()
	if _, err := coord.Recover(ctx); err != nil {
		return fmt.Errorf("%s: recover: %w", m.id, err)
	}
	d.mu.Lock()
	d.phase = "run"
	d.mu.Unlock()
	m.mu.Lock()
	m.recovered = true
	m.mu.Unlock()
	return nil
}

// close ends m's life: Raft first (nothing more is applied), then the coordinator and the
// stores. With the power off their errors are expected and dropped. m.mu is not held while
// they close: their goroutines may still ask m for its leader.
func (m *member) close() {
	m.mu.Lock()
	node, coord, log, data, stop, life := m.node, m.coord, m.log, m.data, m.stop, m.life
	m.up = false
	m.node, m.coord, m.log, m.data = nil, nil, nil, nil
	m.mu.Unlock()
	m.c.nw.setDown(m.i, life)
	if node != nil {
		_ = node.Close()
	}
	if coord != nil {
		_ = coord.Close()
	}
	if log != nil {
		_ = log.Close()
	}
	if data != nil {
		_ = data.Close()
	}
	if stop != nil {
		stop()
	}
}

// live returns m's Raft node and coordinator while m is up, else nils.
func (m *member) live() (*raftmeta.Node, *txn.Coordinator) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.up {
		return nil, nil
	}
	return m.node, m.coord
}

// ready is m's coordinator once this life's recovery has succeeded (it serves other members'
// reads), or nil.
func (m *member) ready() *txn.Coordinator {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.up || !m.recovered {
		return nil
	}
	return m.coord
}

// broken reports why m's life must end: its power failed, its coordinator fail-stopped, or
// its Raft log could not be written; "" if none.
func (m *member) broken() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	switch {
	case !m.up:
		return ""
	case m.d.powerOff():
		return "power loss"
	case m.coord.Usable() != nil:
		return "fail-stop"
	case m.node.LogFault() != nil:
		return "Raft log fault"
	}
	return ""
}

// errNoLeader: the member knows no leader (an election, or it is cut off); the coordinator
// retries.
var errNoLeader = errors.New("sim: no leader known")

// leader is the member m believes leads (its Raft's view, as internal/forward asks it).
func (m *member) leader() (*member, error) {
	node, _ := m.live()
	if node == nil {
		return nil, raftmeta.ErrClosed
	}
	id, _ := node.Leader()
	for _, o := range m.c.ms {
		if o.id == id {
			return o, nil
		}
	}
	return nil, errNoLeader
}
