//go:build chaos

package chaos

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hashicorp/go-hclog"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/third_party/raft"
)

// TestRaftNemesis (L6; faults F17 and F18 of docs/chaos.md's fault table): five
// in-process replicas of fsm.FSM under hashicorp/raft with in-memory transport
// and stores, run in virtual time (testing/synctest), so a minute of partitions
// costs well under a second. Per seed, a nemesis runs nemesisRounds rounds, each
// one fault then a heal: the leader isolated, a minority/majority split, a
// bridge, a one-way cut, flapping links, or a node (the leader or any) crashed
// and restarted from its stores (a fresh FSM restored from its snapshot store).
// Meanwhile recording clients propose one-key COMMITs and REMOVEs to whichever
// node claims to lead and read keys on a leader after a Barrier; a tenth of the applied commands
// are proposed again and must get their first result back (I7: de-duplication
// by TxnID). After the last heal the test requires a leader and a final write,
// then checks
//
//   - I6: every replica has the same FSM Hash at the same applied index;
//   - I2: every acknowledged Stored offload is live, or was removed by a REMOVE the
//     FSM recorded;
//   - I8: the history is linearizable for MetadataModel (a check that runs out of time
//     is repeated once with a longer limit; Unknown then fails too).
//
// A seed fixes the nemesis schedule and the clients' choices; goroutine
// interleavings still vary, so a failing seed reproduces the faults, usually the
// failure. Snapshots are frequent and logs short, so lagging and restarted nodes
// catch up by InstallSnapshot.
func TestRaftNemesis(t *testing.T) {
	base := testkit.Seed(t)
	var failed []uint64
	for i := range *nemesisSeeds {
		seed := base + uint64(i)
		var st nemesisStats
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			h := &History{Dir: t.ArtifactDir()}
			done := make(chan struct{})
			watchdog(nemesisHang, fmt.Sprintf("TestRaftNemesis seed %d", seed), raftLog, done)
			synctest.Test(t, func(t *testing.T) { runNemesis(t, seed, h, &st) })
			close(done)
			if !t.Failed() {
				st.checks += checkLinearizable(t, h) // outside the bubble: porcupine's timeout is real time
			}
		})
		totals.crashes += st.crashes
		totals.recoveries += st.crashes
		totals.checks += st.checks
		if !ok {
			failed = append(failed, seed)
			t.Logf("seed %d failed; reproduce: go test -tags chaos ./chaos -run '^TestRaftNemesis$' -seed %d -nemesis.seeds 1", seed, seed)
		}
	}
	if len(failed) > 0 {
		t.Errorf("failing seeds: %v", failed)
	}
}

// raftLog keeps the replicas' last log lines for the watchdog.
var raftLog = newRingLog(400)

// nemesisHang is the real time after which one seed counts as hung (a seed takes about a
// second).
const nemesisHang = 2 * time.Minute

var nemesisSeeds = flag.Int("nemesis.seeds", 40, "TestRaftNemesis: seeds to run (seed, seed+1, ...)")

const (
	nemesisNodes   = 5
	nemesisRounds  = 10
	nemesisClients = 4
	nemesisKeys    = 12

	// Raft timing as raftmeta's defaults; snapshots often and short logs so
	// followers that fall behind need InstallSnapshot.
	nemesisHeartbeat  = 500 * time.Millisecond
	nemesisLease      = 250 * time.Millisecond
	nemesisCommit     = 50 * time.Millisecond
	nemesisSnapEvery  = 200 * time.Millisecond
	nemesisSnapAfter  = 64
	nemesisTrailing   = 32
	nemesisRPCTimeout = 500 * time.Millisecond

	nemesisApplyTimeout = time.Second            // one raft.Apply or Barrier
	nemesisOpDeadline   = 3 * time.Second        // a client gives up on a request after this
	nemesisClientWait   = 150 * time.Millisecond // and on one attempt after this
	nemesisRetryPause   = 20 * time.Millisecond
	nemesisSettle       = 20 * time.Second // heal to convergence, at most
	nemesisCheckTimeout = 30 * time.Second // porcupine, real time
)

type nemesisStats struct{ crashes, checks int }

// nemesisNode is one replica. Its stores outlive crashes; raft, fsm and trans
// are replaced by a restart (guarded by nemesisCluster.mu).
type nemesisNode struct {
	id    raft.ServerID
	logs  *raft.InmemStore // log and stable store
	snaps *raft.InmemSnapshotStore

	raft  *raft.Raft // nil while crashed
	fsm   *fsm.FSM
	trans *raft.InmemTransport
}

// nemesisCluster owns the replicas and the link matrix.
type nemesisCluster struct {
	t      *testing.T
	mu     sync.Mutex
	nodes  []*nemesisNode
	cut    [nemesisNodes][nemesisNodes]bool // cut[i][j]: i cannot send to j
	errs   map[string]int                   // failed client attempts by error
	resent int                              // applied commands proposed again (I7 checks)
	dupBad int                              // of which answered differently
}

// note counts one failed client attempt.
func (c *nemesisCluster) note(err error) {
	c.mu.Lock()
	c.errs[err.Error()]++
	c.mu.Unlock()
}

// replica is a running raft with the FSM it applies to.
type replica struct {
	i int
	r *raft.Raft
	f *fsm.FSM
}

func newNemesisCluster(t *testing.T) *nemesisCluster {
	c := &nemesisCluster{t: t, errs: map[string]int{}}
	var conf raft.Configuration
	for i := range nemesisNodes {
		n := &nemesisNode{id: raft.ServerID(fmt.Sprintf("n%d", i)), logs: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore()}
		c.nodes = append(c.nodes, n)
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: n.id, Address: raft.ServerAddress(n.id)})
	}
	for _, n := range c.nodes {
		_, trans := raft.NewInmemTransportWithTimeout(raft.ServerAddress(n.id), nemesisRPCTimeout)
		if err := raft.BootstrapCluster(c.config(n), n.logs, n.logs, n.snaps, trans, conf); err != nil {
			t.Fatalf("bootstrap %s: %v", n.id, err)
		}
	}
	for i := range c.nodes {
		c.start(i)
	}
	return c
}

func (c *nemesisCluster) config(n *nemesisNode) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = n.id
	rc.HeartbeatTimeout = nemesisHeartbeat
	rc.ElectionTimeout = nemesisHeartbeat
	rc.LeaderLeaseTimeout = nemesisLease
	rc.CommitTimeout = nemesisCommit
	rc.SnapshotInterval = nemesisSnapEvery
	rc.SnapshotThreshold = nemesisSnapAfter
	rc.TrailingLogs = nemesisTrailing
	rc.NoSnapshotRestoreOnStart = false
	rc.Logger = hclog.New(&hclog.LoggerOptions{Name: string(n.id), Level: hclog.Info, Output: raftLog})
	return rc
}

// start runs node i on its stores with a fresh FSM (raft restores it from the
// newest snapshot) and a fresh transport, then rewires the links.
func (c *nemesisCluster) start(i int) {
	n := c.nodes[i]
	f := fsm.New()
	_, trans := raft.NewInmemTransportWithTimeout(raft.ServerAddress(n.id), nemesisRPCTimeout)
	r, err := raft.NewRaft(c.config(n), nemesisFSM{f}, n.logs, n.logs, n.snaps, trans)
	if err != nil {
		c.t.Fatalf("start %s: %v", n.id, err)
	}
	c.mu.Lock()
	n.raft, n.fsm, n.trans = r, f, trans
	c.mu.Unlock()
	c.wire()
}

// crash shuts node i down (its stores keep everything raft wrote: the real
// store fsyncs before acting) and cuts it off.
func (c *nemesisCluster) crash(i int) {
	c.mu.Lock()
	n := c.nodes[i]
	r, trans := n.raft, n.trans
	n.raft = nil
	c.mu.Unlock()
	if err := r.Shutdown().Error(); err != nil {
		c.t.Errorf("shutdown %s: %v", n.id, err)
	}
	trans.DisconnectAll()
	c.wire()
}

// wire connects every link between running nodes that is not cut, and
// disconnects the others.
func (c *nemesisCluster) wire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, a := range c.nodes {
		for j, b := range c.nodes {
			switch {
			case i == j || a.raft == nil:
			case b.raft == nil || c.cut[i][j]:
				a.trans.Disconnect(raft.ServerAddress(b.id))
			default:
				a.trans.Connect(raft.ServerAddress(b.id), b.trans)
			}
		}
	}
}

// setCut cuts (or heals) the links from each node of from to each node of to.
func (c *nemesisCluster) setCut(from, to []int, cut bool) {
	c.mu.Lock()
	for _, i := range from {
		for _, j := range to {
			c.cut[i][j] = cut
		}
	}
	c.mu.Unlock()
	c.wire()
}

// split cuts both directions between a and b.
func (c *nemesisCluster) split(a, b []int) {
	c.setCut(a, b, true)
	c.setCut(b, a, true)
}

func (c *nemesisCluster) healAll() {
	c.mu.Lock()
	c.cut = [nemesisNodes][nemesisNodes]bool{}
	c.mu.Unlock()
	c.wire()
}

func (c *nemesisCluster) replicas() []replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	var rs []replica
	for i, n := range c.nodes {
		if n.raft != nil {
			rs = append(rs, replica{i, n.raft, n.fsm})
		}
	}
	return rs
}

// leaders returns the running nodes that believe they lead, newest term first
// (a deposed leader may not know yet).
func (c *nemesisCluster) leaders() []replica {
	var ls []replica
	for _, r := range c.replicas() {
		if r.r.State() == raft.Leader {
			ls = append(ls, r)
		}
	}
	slices.SortFunc(ls, func(a, b replica) int { return cmp.Compare(b.r.CurrentTerm(), a.r.CurrentTerm()) })
	return ls
}

// waitLeader polls for a node that believes it leads.
func (c *nemesisCluster) waitLeader(d time.Duration) (replica, bool) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if ls := c.leaders(); len(ls) > 0 {
			return ls[0], true
		}
	}
	return replica{}, false
}

func (c *nemesisCluster) shutdown() {
	for i, n := range c.nodes {
		if n.raft != nil {
			c.crash(i)
		}
	}
}

// nemesisFSM adapts *fsm.FSM to raft.FSM, as raftmeta's adapter does.
type nemesisFSM struct{ f *fsm.FSM }

func (a nemesisFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	return a.f.ApplyCommand(l.Index, l.Data)
}

func (a nemesisFSM) Snapshot() (raft.FSMSnapshot, error) { return nemesisSnapshot{a.f.Snapshot()}, nil }

func (a nemesisFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	return a.f.Restore(rc)
}

type nemesisSnapshot struct{ s *fsm.Snapshot }

func (s nemesisSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.s.WriteTo(sink); err != nil {
		return errors.Join(err, sink.Cancel())
	}
	return sink.Close()
}

func (nemesisSnapshot) Release() {}

// runNemesis runs one seed inside a synctest bubble, recording into h and
// counting into st. It checks I6 and I2; the caller checks h (I8).
func runNemesis(t *testing.T, seed uint64, h *History, st *nemesisStats) {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65))
	c := newNemesisCluster(t)
	defer c.shutdown()
	if _, ok := c.waitLeader(nemesisSettle); !ok {
		t.Fatal("no leader after start")
	}

	stop := make(chan struct{})
	var clients sync.WaitGroup
	for id := range nemesisClients {
		cl := &nemesisClient{id: id, c: c, h: h, rng: rand.New(rand.NewPCG(seed, uint64(id)))}
		clients.Go(func() { cl.run(stop) })
	}
	var schedule []string
	for range nemesisRounds {
		what := nemesisRound(c, rng, st)
		schedule = append(schedule, what)
		c.healAll()
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
	}
	close(stop)
	clients.Wait()
	t.Logf("schedule: %v", schedule)
	t.Logf("failed client attempts: %v; %d applied commands proposed again", c.errs, c.resent)
	st.checks += c.resent
	if c.dupBad > 0 {
		t.Errorf("I7: %d of %d commands proposed again got a different result", c.dupBad, c.resent)
	}

	// Heal is done and every node runs: require a leader and a final write.
	leader, ok := c.waitLeader(nemesisSettle)
	if !ok {
		t.Fatal("no leader after heal")
	}
	final := &nemesisClient{id: nemesisClients, c: c, h: h, rng: rand.New(rand.NewPCG(seed, nemesisClients))}
	if res := final.offload("final", 1); res.Status != Done {
		t.Fatalf("final write after heal: %+v", res)
	}
	if leader, ok = c.waitLeader(nemesisSettle); !ok {
		t.Fatal("no leader after the final write")
	}
	if err := leader.r.Barrier(nemesisApplyTimeout).Error(); err != nil {
		t.Fatalf("barrier on %d after heal: %v", leader.i, err)
	}

	// I6: all replicas reach the leader's applied index with equal hashes.
	want := leader.f.AppliedIndex()
	rs := c.replicas()
	if len(rs) != nemesisNodes {
		t.Fatalf("%d of %d nodes run after heal", len(rs), nemesisNodes)
	}
	for end := time.Now().Add(nemesisSettle); ; time.Sleep(10 * time.Millisecond) {
		behind := slices.IndexFunc(rs, func(r replica) bool { return r.f.AppliedIndex() != want })
		if behind < 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("I6: node %d applied %d, leader %d applied %d, after %v", rs[behind].i, rs[behind].f.AppliedIndex(), leader.i, want, nemesisSettle)
		}
	}
	for _, r := range rs {
		if r.f.Hash() != leader.f.Hash() {
			t.Errorf("I6: node %d hash %x != leader %d hash %x at applied index %d", r.i, r.f.Hash(), leader.i, leader.f.Hash(), want)
		}
		st.checks++
	}

	// Indeterminate writes get their recorded outcome or drop out; then a final
	// read of every key on the leader.
	committed, dropped, err := h.Resolve(leader.f.TxnResult)
	if err != nil {
		t.Fatal(err)
	}
	for k := range nemesisKeys {
		final.lookup(nemesisKey(k))
	}

	st.checks += checkAcknowledged(t, h, leader.f)
	t.Logf("%d indeterminate writes committed, %d never did", committed, dropped)
}

// checkLinearizable checks I8 on h and returns the number of operations checked.
func checkLinearizable(t *testing.T, h *History) int {
	t.Helper()
	start := time.Now()
	res, html := checkKnown(t, nemesisCheckTimeout, func(limit time.Duration) (porcupine.CheckResult, string) {
		return CheckHistory(h, limit)
	})
	n := len(h.Ops())
	t.Logf("linearizability of %d operations: %s in %v", n, res, time.Since(start).Round(time.Millisecond))
	if res != porcupine.Ok {
		t.Errorf("I8: history is %s; visualization %s (kept with -artifacts)", res, html)
	}
	return n
}

// porcupineRecheck is the real-time limit of the second check of a history whose first
// linearizability check ran out of time.
const porcupineRecheck = 5 * time.Minute

// checkKnown runs a linearizability check with the real-time limit and returns what it
// returns. porcupine answers Unknown when the limit runs out, which says nothing about the
// history (the machine may just be loaded): that is logged and the check runs once more
// with porcupineRecheck. Still Unknown fails the test; Illegal is the caller's to report.
func checkKnown[T any](t *testing.T, limit time.Duration, check func(limit time.Duration) (porcupine.CheckResult, T)) (porcupine.CheckResult, T) {
	t.Helper()
	res, out := check(limit)
	if res != porcupine.Unknown {
		return res, out
	}
	t.Logf("linearizability unknown after %v (porcupine's time limit ran out); checking again with %v", limit, porcupineRecheck)
	start := time.Now()
	res, out = check(porcupineRecheck)
	if res == porcupine.Unknown {
		t.Fatalf("I8: linearizability still unknown after a second check of %v: porcupine neither linearized the history nor found it illegal", porcupineRecheck)
	}
	t.Logf("second linearizability check: %s in %v", res, time.Since(start).Round(time.Millisecond))
	return res, out
}

// nemesisRound injects one fault, holds it, and returns what it did. The caller heals.
func nemesisRound(c *nemesisCluster, rng *rand.Rand, st *nemesisStats) string {
	hold := time.Duration(500+rng.IntN(2500)) * time.Millisecond
	perm := rng.Perm(nemesisNodes)
	leader := perm[0]
	if ls := c.leaders(); len(ls) > 0 {
		leader = ls[0].i
	}
	others := slices.DeleteFunc(slices.Clone(perm), func(i int) bool { return i == leader })
	switch kind := rng.IntN(7); kind {
	case 0:
		c.split([]int{leader}, others)
		time.Sleep(hold)
		return fmt.Sprintf("isolate leader %d", leader)
	case 1:
		m := 1 + rng.IntN(2)
		c.split(perm[:m], perm[m:])
		time.Sleep(hold)
		return fmt.Sprintf("split %v|%v", perm[:m], perm[m:])
	case 2:
		// perm[0] bridges two halves that cannot see each other.
		c.split(perm[1:3], perm[3:])
		time.Sleep(hold)
		return fmt.Sprintf("bridge %d between %v|%v", perm[0], perm[1:3], perm[3:])
	case 3:
		// One way. A cut stops new calls only (the in-memory transport carries
		// the reply of a call it delivered), so "no calls into the leader" only
		// stops candidates from asking it for votes.
		if rng.IntN(2) == 0 {
			c.setCut([]int{leader}, others, true)
			time.Sleep(hold)
			return fmt.Sprintf("leader %d cannot call out", leader)
		}
		c.setCut(others, []int{leader}, true)
		time.Sleep(hold)
		return fmt.Sprintf("no calls into leader %d", leader)
	case 4:
		flips := 0
		for end := time.Now().Add(hold); time.Now().Before(end); flips++ {
			i, j := rng.IntN(nemesisNodes), rng.IntN(nemesisNodes)
			c.mu.Lock()
			c.cut[i][j] = !c.cut[i][j]
			c.mu.Unlock()
			c.wire()
			time.Sleep(time.Duration(20+rng.IntN(150)) * time.Millisecond)
		}
		return fmt.Sprintf("flapping (%d flips)", flips)
	case 5, 6:
		victim := perm[0]
		if kind == 5 {
			victim = leader
		}
		c.crash(victim)
		st.crashes++
		time.Sleep(hold)
		c.start(victim)
		return fmt.Sprintf("crash+restart %d", victim)
	}
	panic("unreachable")
}

func nemesisKey(k int) string { return fmt.Sprintf("k%02d", k) }

// nemesisClient proposes and reads, recording every request in h.
type nemesisClient struct {
	id  int
	c   *nemesisCluster
	h   *History
	rng *rand.Rand
}

func (cl *nemesisClient) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		key := nemesisKey(cl.rng.IntN(nemesisKeys))
		switch p := cl.rng.IntN(100); {
		case p < 45:
			cl.offload(key, 1+uint64(cl.rng.IntN(3)))
		case p < 65:
			cl.remove(key)
		default:
			cl.lookup(key)
		}
		time.Sleep(time.Duration(5+cl.rng.IntN(40)) * time.Millisecond)
	}
}

func (cl *nemesisClient) txnID() fsm.TxnID {
	var id fsm.TxnID
	for i := range id {
		id[i] = byte(cl.rng.Uint32())
	}
	return id
}

// pick returns a node that claims to lead (any of them, to exercise deposed
// leaders), or false.
func (cl *nemesisClient) pick() (replica, bool) {
	ls := cl.c.leaders()
	if len(ls) == 0 {
		return replica{}, false
	}
	return ls[cl.rng.IntN(len(ls))], true
}

// offload proposes a one-key COMMIT with the generation the chosen node's FSM
// suggests (possibly stale: then the FSM answers Stale).
func (cl *nemesisClient) offload(key string, sum uint64) Result {
	var gen uint64
	if r, ok := cl.pick(); ok {
		gen = r.f.Generation(key) + 1
	} else if rs := cl.c.replicas(); len(rs) > 0 {
		gen = rs[cl.rng.IntN(len(rs))].f.Generation(key) + 1
	}
	op := Op{Kind: OpOffload, Key: key, TxnID: cl.txnID(), Sum: sum, Gen: gen}
	cmd := fsm.EncodeCommit(fsm.Commit{TxnID: op.TxnID, Node: "n", Entries: []fsm.Entry{{Key: key, Size: 4096, Sum: sum, Gen: gen}}})
	return cl.propose(op, cmd)
}

func (cl *nemesisClient) remove(key string) Result {
	op := Op{Kind: OpRemove, Key: key, TxnID: cl.txnID()}
	return cl.propose(op, fsm.EncodeRemove(fsm.Remove{TxnID: op.TxnID, Keys: []fsm.KeyGen{{Key: key}}}))
}

// propose sends cmd to a leader, retrying with the same TxnID (the FSM
// de-duplicates) until it applies or nemesisOpDeadline passes. Each attempt is
// waited for at most nemesisClientWait; after an attempt that may have been
// appended (leadership lost, shutdown, no answer in time) the client gives up half
// of the time, as an impatient client would, and the request is Unknown.
func (cl *nemesisClient) propose(op Op, cmd []byte) Result {
	id := cl.h.Call(cl.id, op)
	res := Result{Status: Failed}
	for end := time.Now().Add(nemesisOpDeadline); time.Now().Before(end); time.Sleep(nemesisRetryPause) {
		r, ok := cl.pick()
		if !ok {
			continue
		}
		fut := r.r.Apply(cmd, nemesisApplyTimeout)
		answered := make(chan error, 1)
		go func() { answered <- fut.Error() }()
		var err error
		select {
		case err = <-answered:
		case <-time.After(nemesisClientWait):
			err = errClientTimeout
		}
		if err == nil {
			fr, _ := fut.Response().(*fsm.Result)
			if res, err = ResultOf(fr); err != nil {
				cl.c.t.Errorf("client %d: %v", cl.id, err)
				res = Result{Status: Unknown}
			}
			break
		}
		cl.c.note(err)
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrEnqueueTimeout) ||
			errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			continue // never appended
		}
		res.Status = Unknown
		if cl.rng.IntN(2) == 0 {
			break
		}
	}
	cl.h.Return(id, res)
	if res.Status == Done && cl.rng.IntN(10) == 0 {
		cl.resend(op, cmd, res)
	}
	return res
}

// resend proposes an applied command again, as a client whose answer got lost
// would, and requires the original result (I7: the FSM de-duplicates by TxnID).
func (cl *nemesisClient) resend(op Op, cmd []byte, first Result) {
	r, ok := cl.pick()
	if !ok {
		return
	}
	fut := r.r.Apply(cmd, nemesisApplyTimeout)
	if fut.Error() != nil {
		return
	}
	fr, _ := fut.Response().(*fsm.Result)
	again, err := ResultOf(fr)
	if err == nil && again != first {
		err = fmt.Errorf("got %v, first %v", again.Outcome, first.Outcome)
	}
	cl.c.mu.Lock()
	defer cl.c.mu.Unlock()
	cl.c.resent++
	if err != nil {
		if cl.c.dupBad++; cl.c.dupBad <= 3 {
			cl.c.t.Errorf("I7: %s of %s by txn %s proposed again: %v", op.Kind, op.Key, op.TxnID, err)
		}
	}
}

var errClientTimeout = errors.New("client gave up waiting")

// lookup reads key on a leader after a Barrier: everything committed before the
// read started is applied there, and a deposed leader cannot pass the Barrier.
func (cl *nemesisClient) lookup(key string) {
	id := cl.h.Call(cl.id, Op{Kind: OpLookup, Key: key})
	r, ok := cl.pick()
	if !ok {
		cl.h.Return(id, Result{Status: Failed})
		return
	}
	if err := r.r.Barrier(nemesisApplyTimeout).Error(); err != nil {
		cl.c.note(fmt.Errorf("barrier: %w", err))
		cl.h.Return(id, Result{Status: Failed})
		return
	}
	// Generation changes with every state change of the key, so equal
	// generations around Lookup mean the pair is one state.
	for {
		g := r.f.Generation(key)
		e, present := r.f.Lookup(key)
		if r.f.Generation(key) != g {
			continue
		}
		res := Result{Status: Done, Present: present, Gen: g}
		if present {
			res.Sum = e.Sum
		}
		cl.h.Return(id, res)
		return
	}
}

// checkAcknowledged checks I2 on f: every offload acknowledged Stored is live
// with its TxnID, or some REMOVE in the history that f recorded removed exactly
// that version. It returns the number of checks.
func checkAcknowledged(t *testing.T, h *History, f *fsm.FSM) int {
	t.Helper()
	removedBy := map[fsm.TxnID]fsm.TxnID{} // removed version's TxnID -> remove's TxnID
	var stored []Op
	for _, o := range h.Ops() {
		op := o.Input.(Op)
		res, _ := o.Output.(Result)
		switch {
		case op.Kind == OpOffload && res.Status == Done && res.Outcome == fsm.OutcomeStored:
			stored = append(stored, op)
		case op.Kind == OpRemove:
			if r, ok := f.TxnResult(op.TxnID); ok && len(r.Keys) == 1 && r.Keys[0].Outcome == fsm.OutcomeRemoved {
				removedBy[r.Keys[0].Entry.TxnID] = op.TxnID
			}
		}
	}
	var lost []string
	for _, op := range stored {
		e, live := f.Lookup(op.Key)
		if live && e.TxnID == op.TxnID {
			continue
		}
		if _, removed := removedBy[op.TxnID]; !removed {
			lost = append(lost, fmt.Sprintf("%s by txn %s (live: %v, txn %s)", op.Key, op.TxnID, live, e.TxnID))
		}
	}
	if len(lost) > 0 {
		t.Errorf("I2: %d offloads acknowledged Stored are neither live nor removed by a recorded REMOVE, first: %s",
			len(lost), strings.Join(lost[:min(len(lost), 5)], "; "))
	}
	return len(stored)
}
