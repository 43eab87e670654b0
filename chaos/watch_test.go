//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/node"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// The watch tier (TestWatchThroughFaults; docs/chaos.md): three members, each the test binary
// re-executed as a node process (memberMain) with its Raft address advertised through a
// tcpProxy, three writers offloading unique keys and removing some of them, and six
// consumers of client.Watch, while the leader is killed (SIGKILL, restart), a follower is cut
// off, and one member's log is compacted into a forced snapshot before it is killed and
// restarted. The consumers:
//
//   - ref watches through member S only, which is never compacted and never cut off: its
//     stream is expected to have no reset, and is the reference the others are checked
//     against (a restart of S without a snapshot replays its whole log).
//   - all1, all2 watch through every member: they resume through the client's failover.
//   - vonly watches through V only, the member that is compacted: it resumes through V's
//     kill and restart.
//   - paused watches through every member, stops before V's snapshot and watches again from
//     its last position through V only once V has restarted: a resume from before the
//     snapshot, which must be a reset, a listing, then the rest.
//   - late starts from position 0 through V after its restart: a reset, a listing, the rest.
//
// The checker (checkWatch) holds every stream to the rules of docs/api.md "Watching the
// stored keys":
//
//   - each stream is well formed: events in strictly increasing positions, a reset after the
//     last event at ordinal 0, exactly Listed listed keys at its position, a store only of an
//     absent key and a removal only of a key stored in that generation;
//   - streams agree: one position is one event on every stream (the union is the truth T);
//   - no skip: every stretch of a stream without a reset holds every event of T in its range;
//   - a reset's listing is the state at its position, computed from a stream that covers it;
//   - every acknowledged store appears stored, every acknowledged remove appears removed
//     (cause "removed") after its store, in commit order (an operation acknowledged before
//     another began comes first in the stream), and nothing appears that no writer tried;
//   - every consumer's final view, T's final state and each member's final listing are equal.
const (
	watchWriters  = 3
	watchPayload  = 4 << 10
	watchOpLimit  = 8 * time.Second
	watchMemberUp = 60 * time.Second
	memberEnv     = "KVOFFLOAD_CHAOS_MEMBER" // the member's memberSpec as JSON
)

// memberSpec is what memberMain needs to run one member.
type memberSpec struct {
	ID, Data, Raft, Advertise, API, Peer string
	Join                                 []string
}

// readyFile is created by the member once it serves; snapFile holds the outcome of each
// snapshot it was asked for (SIGUSR1): "ok" or the error.
func (s memberSpec) readyFile() string { return s.Data + ".ready" }
func (s memberSpec) snapFile() string  { return s.Data + ".snap" }

// memberMain runs one member until SIGTERM: a Raft snapshot (and log compaction) on each
// SIGUSR1.
func memberMain() int {
	var s memberSpec
	if err := json.Unmarshal([]byte(os.Getenv(memberEnv)), &s); err != nil {
		fmt.Fprintln(os.Stderr, "member:", err)
		return 2
	}
	cfg := node.DefaultConfig(s.Data)
	cfg.ID, cfg.Txn.NodeID = s.ID, s.ID
	cfg.RaftAddr, cfg.RaftAdvertise, cfg.APIAddr, cfg.PeerAddr, cfg.Join = s.Raft, s.Advertise, s.API, s.Peer, s.Join
	cfg.BucketSize = 8 << 20
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	snap := make(chan os.Signal, 1)
	signal.Notify(snap, syscall.SIGUSR1)
	n, err := node.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "member: open:", err)
		return 3
	}
	for n.Ready() != nil && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.WriteFile(s.readyFile(), nil, 0o640); err != nil {
		fmt.Fprintln(os.Stderr, "member:", err)
		return 4
	}
	for {
		select {
		case <-ctx.Done():
			if err := n.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "member: close:", err)
				return 5
			}
			return 0
		case <-snap:
			out := "ok"
			if err := n.Snapshot(); err != nil {
				out = err.Error()
			}
			if err := os.WriteFile(s.snapFile(), []byte(out), 0o640); err != nil {
				fmt.Fprintln(os.Stderr, "member:", err)
				return 4
			}
		}
	}
}

// watchMember is one member process as the parent sees it.
type watchMember struct {
	spec   memberSpec
	proxy  *tcpProxy
	cmd    *exec.Cmd
	exited chan struct{}
}

type watchCluster struct {
	t       *testing.T
	members []*watchMember
}

func startWatchCluster(t *testing.T) *watchCluster {
	t.Helper()
	c := &watchCluster{t: t}
	base := t.TempDir()
	KeepOnFailure(t, base)
	t.Cleanup(c.stopAll)
	for i := range 3 {
		m := &watchMember{spec: memberSpec{ID: fmt.Sprintf("n%d", i+1), Data: filepath.Join(base, fmt.Sprintf("n%d", i+1)),
			Raft: freePort(t), API: freePort(t), Peer: freePort(t)}}
		m.proxy = startProxy(t, m.spec.Raft)
		m.spec.Advertise = m.proxy.addr()
		if i > 0 {
			m.spec.Join = []string{c.members[0].spec.Peer}
		}
		c.members = append(c.members, m)
		c.start(m)
	}
	return c
}

// start runs m and waits until it serves.
func (c *watchCluster) start(m *watchMember) {
	c.t.Helper()
	_ = os.Remove(m.spec.readyFile())
	spec, err := json.Marshal(m.spec)
	if err != nil {
		c.t.Fatal(err)
	}
	m.cmd = exec.Command(os.Args[0], "-test.run=^$")
	m.cmd.Env = append(os.Environ(), memberEnv+"="+string(spec))
	m.cmd.Stderr = os.Stderr
	if err := m.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	m.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(m.cmd, m.exited)
	for deadline := time.Now().Add(watchMemberUp); ; {
		if _, err := os.Stat(m.spec.readyFile()); err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s not ready after %v", m.spec.ID, watchMemberUp)
		}
		select {
		case <-m.exited:
			c.t.Fatalf("%s exited before it was ready", m.spec.ID)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *watchCluster) kill(m *watchMember) {
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
	totals.crashes++
}

func (c *watchCluster) restart(m *watchMember) {
	c.t.Helper()
	c.start(m)
	totals.recoveries++
}

// snapshot has m compact its log into a snapshot and waits for the outcome.
func (c *watchCluster) snapshot(m *watchMember) {
	c.t.Helper()
	_ = os.Remove(m.spec.snapFile())
	if err := m.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		c.t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(m.spec.snapFile()); err == nil && len(b) > 0 {
			if string(b) != "ok" {
				c.t.Fatalf("snapshot of %s: %s", m.spec.ID, b)
			}
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("snapshot of %s: no outcome after 10 s", m.spec.ID)
		}
	}
}

func (c *watchCluster) stopAll() {
	for _, m := range c.members {
		if m.exited != nil {
			_ = m.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, m := range c.members {
		if m.exited == nil {
			continue
		}
		select {
		case <-m.exited:
		case <-time.After(15 * time.Second):
			_ = m.cmd.Process.Kill()
		}
	}
}

func (c *watchCluster) addrs(ms ...*watchMember) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.spec.API)
	}
	return out
}

// leader returns the member that the status of one of through names as the leader.
func (c *watchCluster) leader(ctx context.Context, through ...*watchMember) *watchMember {
	c.t.Helper()
	cl, err := client.Dial(ctx, c.addrs(through...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	for ctx.Err() == nil {
		if st, err := cl.Status(ctx); err == nil && st.LeaderID != "" {
			for _, m := range c.members {
				if m.spec.ID == st.LeaderID {
					return m
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatal("no leader")
	return nil
}

// watchOp is one writer request: an offload of keys or a remove of keys[0]. call and ret
// are ticks of one clock shared by the writers.
type watchOp struct {
	remove    bool
	keys      []string
	call, ret int64
	// acked are the keys the request was acknowledged for: offload outcome Stored or
	// AlreadyStored (the keys are unique: the store is this request's), remove Removed.
	acked []string
	// failed: the request was answered and did nothing (an offload's non-OK outcome).
	failed []string
}

// watchHistory is every writer request.
type watchHistory struct {
	mu    sync.Mutex
	clock atomic.Int64
	ops   []*watchOp
}

func (h *watchHistory) add(op *watchOp) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// watchWriter offloads batches of 1-3 unique keys and, one request in four, removes a key
// it stored, until ctx ends.
func watchWriter(ctx context.Context, cl *client.Client, id int, seed uint64, h *watchHistory) {
	rng := rand.New(rand.NewPCG(seed, uint64(200+id)))
	var stored []string
	for seq := 0; ctx.Err() == nil; seq++ {
		op := &watchOp{}
		opCtx, cancel := context.WithTimeout(ctx, watchOpLimit)
		if seq%4 == 3 && len(stored) > 0 {
			i := rng.IntN(len(stored))
			k := stored[i]
			stored = slices.Delete(stored, i, i+1) // removed once, whatever the outcome
			op.remove, op.keys = true, []string{k}
			op.call = h.clock.Add(1)
			res, err := cl.Remove(opCtx, op.keys)
			op.ret = h.clock.Add(1)
			if err == nil && res[0].Removed {
				op.acked = op.keys
			}
		} else {
			objs := make([]kvoffload.Object, 1+rng.IntN(3))
			for i := range objs {
				k := fmt.Sprintf("watch@w%d@%05d@%d", id, seq, i)
				op.keys = append(op.keys, k)
				objs[i] = kvoffload.Object{Key: k, Value: trace.Payload(seed, k, watchPayload)}
			}
			op.call = h.clock.Add(1)
			res, err := cl.BatchOffload(opCtx, kvoffload.NewTxnID(), objs)
			op.ret = h.clock.Add(1)
			for _, r := range res {
				switch {
				case err != nil:
				case r.Outcome == kvoffload.Stored || r.Outcome == kvoffload.AlreadyStored:
					op.acked = append(op.acked, r.Key)
					stored = append(stored, r.Key)
				case r.Outcome != kvoffload.Failed:
					op.failed = append(op.failed, r.Key)
				}
			}
		}
		cancel()
		h.add(op)
		totals.checks++
		time.Sleep(time.Duration(5+rng.IntN(10)) * time.Millisecond)
	}
}

// watchConsumer is one consumer's record: every event its Watch calls yielded, in order.
type watchConsumer struct {
	name string
	mu   sync.Mutex
	evs  []client.Event
	err  error // a Watch error other than the end of the consumer's context
	// listing counts the listed events of the last reset still to come.
	listing uint64
	// resume is where a new Watch call continues: the last event yielded, or the position of
	// the last reset whose listing is complete.
	resume client.Position
}

// watch runs one Watch call from c.resume through addrs until ctx ends or pause is closed
// (then at a point where the stream can be resumed: not within a listing).
func (c *watchConsumer) watch(ctx context.Context, addrs []string, pause <-chan struct{}, opts ...client.WatchOption) {
	cl, err := client.Dial(ctx, addrs...)
	if err != nil {
		c.fail(err)
		return
	}
	defer cl.Close()
	c.mu.Lock()
	from := c.resume
	c.mu.Unlock()
	for ev, err := range cl.Watch(ctx, from, opts...) {
		if err != nil {
			if ctx.Err() == nil {
				c.fail(err)
			}
			return
		}
		c.mu.Lock()
		c.evs = append(c.evs, ev)
		switch ev.Kind {
		case client.EventReset:
			c.listing = ev.Listed
			if c.listing == 0 {
				c.resume = ev.Pos
			}
		case client.EventListed:
			if c.listing--; c.listing == 0 {
				c.resume = ev.Pos
			}
		default:
			c.resume = ev.Pos
		}
		resumable := c.listing == 0
		c.mu.Unlock()
		if resumable {
			select {
			case <-pause:
				return
			default:
			}
		}
	}
}

func (c *watchConsumer) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

// saw reports whether key was yielded stored or listed.
func (c *watchConsumer) saw(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range slices.Backward(c.evs) {
		if ev.Key == key && (ev.Kind == client.EventStored || ev.Kind == client.EventListed) {
			return true
		}
	}
	return false
}

func (c *watchConsumer) resets() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ev := range c.evs {
		if ev.Kind == client.EventReset {
			n++
		}
	}
	return n
}

// TestWatchThroughFaults is the watch tier (the comment at the top of this file).
func TestWatchThroughFaults(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 32))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	c := startWatchCluster(t)
	leader := c.leader(ctx, c.members...)
	var followers []*watchMember
	for _, m := range c.members {
		if m != leader {
			followers = append(followers, m)
		}
	}
	stable, victim := followers[0], followers[1]
	if rng.IntN(2) == 0 {
		stable, victim = victim, stable
	}
	t.Logf("leader %s, reference member %s, compacted member %s (cluster up in %v)", leader.spec.ID, stable.spec.ID,
		victim.spec.ID, time.Since(start).Round(time.Millisecond))

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var consumers []*watchConsumer
	var wwg sync.WaitGroup
	// consume starts a consumer; done is closed when its Watch call returns.
	consume := func(name string, addrs []string, pause <-chan struct{}) (cs *watchConsumer, done <-chan struct{}) {
		cs = &watchConsumer{name: name}
		consumers = append(consumers, cs)
		ch := make(chan struct{})
		wwg.Add(1)
		go func() { defer wwg.Done(); defer close(ch); cs.watch(watchCtx, addrs, pause) }()
		return cs, ch
	}
	all := c.addrs(c.members...)
	rotated := append(all[1:len(all):len(all)], all[0])
	consume("ref", c.addrs(stable), nil)
	consume("all1", all, nil)
	consume("all2", rotated, nil)
	consume("vonly", c.addrs(victim), nil)
	pause := make(chan struct{})
	paused, pausedDone := consume("paused", all, pause)

	h := &watchHistory{}
	load, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var lwg sync.WaitGroup
	for i := range watchWriters {
		cl, err := client.Dial(ctx, rotatedBy(all, i)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		lwg.Add(1)
		go func() { defer lwg.Done(); watchWriter(load, cl, i, seed, h) }()
	}
	hold := func() time.Duration { return time.Duration(800+rng.IntN(700)) * time.Millisecond }

	// Fault 1: the leader is killed and restarted.
	time.Sleep(hold())
	l := c.leader(ctx, c.members...)
	c.kill(l)
	d := hold()
	time.Sleep(d)
	c.restart(l)
	t.Logf("killed leader %s for %v", l.spec.ID, d)

	// Fault 2: nothing reaches a follower other than the reference member: it hears no
	// leader, campaigns, and its higher term deposes the leader once healed.
	time.Sleep(hold())
	l = c.leader(ctx, c.members...)
	var cuttable []*watchMember
	for _, m := range c.members {
		if m != l && m != stable {
			cuttable = append(cuttable, m)
		}
	}
	cut := cuttable[rng.IntN(len(cuttable))]
	cut.proxy.blackhole(true)
	d = hold() + time.Second
	time.Sleep(d)
	cut.proxy.blackhole(false)
	t.Logf("cut off follower %s for %v", cut.spec.ID, d)

	// Fault 3: the paused consumer stops; the victim compacts its log into a snapshot, is
	// killed and restarted; the paused consumer resumes through it from before the snapshot,
	// and a late consumer starts there from position 0.
	time.Sleep(hold())
	close(pause)
	<-pausedDone
	time.Sleep(300 * time.Millisecond) // writes commit after the paused consumer's position
	c.snapshot(victim)
	time.Sleep(200 * time.Millisecond)
	c.kill(victim)
	c.restart(victim)
	t.Logf("compacted %s's log, killed and restarted it; paused consumer resumes from %s", victim.spec.ID, paused.resume)
	wwg.Add(1)
	go func() { defer wwg.Done(); paused.watch(watchCtx, c.addrs(victim), nil) }()
	late, _ := consume("late", c.addrs(victim), nil)

	time.Sleep(hold())
	stopLoad()
	lwg.Wait()

	// The fence: the last write; every consumer has caught up once it yields it.
	fence := "watch@fence"
	fcl, err := client.Dial(ctx, all...)
	if err != nil {
		t.Fatal(err)
	}
	defer fcl.Close()
	fop := &watchOp{keys: []string{fence}, call: h.clock.Add(1)}
	res, err := fcl.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: fence, Value: trace.Payload(seed, fence, watchPayload)}})
	fop.ret = h.clock.Add(1)
	if err != nil || !res[0].Outcome.OK() {
		t.Fatalf("I10: the fence write after the faults: %v %+v", err, res)
	}
	fop.acked = fop.keys
	h.add(fop)
	for _, cs := range consumers {
		for deadline := time.Now().Add(20 * time.Second); !cs.saw(fence); time.Sleep(20 * time.Millisecond) {
			cs.mu.Lock()
			err, at := cs.err, cs.resume
			cs.mu.Unlock()
			if err != nil {
				t.Fatalf("consumer %s: %v", cs.name, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("consumer %s has not yielded the fence 20 s after it was acknowledged (at %s)", cs.name, at)
			}
		}
	}
	stopWatch()
	wwg.Wait()

	// Each member's final listing.
	var finals []map[string]uint64
	for _, m := range c.members {
		finals = append(finals, finalListing(t, ctx, m))
	}
	checkWatch(t, h, consumers, finals, fence)
	if paused.resets() == 0 || late.resets() == 0 {
		t.Fatalf("the compaction of %s was not exercised: %d resets on the paused consumer, %d on the late one", victim.spec.ID, paused.resets(), late.resets())
	}
	t.Logf("done in %v", time.Since(start).Round(time.Millisecond))
}

// rotatedBy returns addrs starting at its i-th.
func rotatedBy(addrs []string, i int) []string {
	i %= len(addrs)
	return append(slices.Clone(addrs[i:]), addrs[:i]...)
}

// finalListing returns the keys member m lists (a reset and a listing, then nothing more).
func finalListing(t *testing.T, ctx context.Context, m *watchMember) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, m.spec.API)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]uint64{}
	for ev, err := range cl.Watch(ctx, client.Position{}, client.WatchList(), client.WatchUntilNow()) {
		if err != nil {
			t.Fatalf("final listing through %s: %v", m.spec.ID, err)
		}
		switch ev.Kind {
		case client.EventListed, client.EventStored:
			out[ev.Key] = ev.Generation
		case client.EventRemoved:
			delete(out, ev.Key)
		}
	}
	return out
}

// watchSegment is a stretch of one consumer's stream without a reset: from a known state at
// start (empty at position 0, or a reset's listing) through its events.
type watchSegment struct {
	consumer string
	start    client.Position
	state    map[string]uint64 // key -> generation at start
	evs      []client.Event    // STORED and REMOVED, in order
}

// end is the last position the segment is complete through.
func (s *watchSegment) end() client.Position {
	if len(s.evs) == 0 {
		return s.start
	}
	return s.evs[len(s.evs)-1].Pos
}

// stateAt returns the segment's state before position p.
func (s *watchSegment) stateAt(p client.Position) map[string]uint64 {
	st := maps.Clone(s.state)
	for _, ev := range s.evs {
		if !ev.Pos.Less(p) {
			break
		}
		applyEvent(st, ev)
	}
	return st
}

func applyEvent(st map[string]uint64, ev client.Event) {
	if ev.Kind == client.EventStored {
		st[ev.Key] = ev.Generation
	} else {
		delete(st, ev.Key)
	}
}

// segments checks cs's stream for form and returns its segments and final view.
func segments(t *testing.T, cs *watchConsumer) ([]*watchSegment, map[string]uint64) {
	t.Helper()
	if cs.err != nil {
		t.Fatalf("consumer %s: %v", cs.name, cs.err)
	}
	seg := &watchSegment{consumer: cs.name, state: map[string]uint64{}}
	segs := []*watchSegment{seg}
	view := map[string]uint64{}
	var last client.Position
	var listing uint64
	for i, ev := range cs.evs {
		bad := func(format string, args ...any) {
			t.Fatalf("consumer %s, event %d (%s at %s, %q): %s", cs.name, i, ev.Kind, ev.Pos, ev.Key, fmt.Sprintf(format, args...))
		}
		switch ev.Kind {
		case client.EventReset:
			if listing > 0 {
				bad("a reset with %d listed keys of the last one to come", listing)
			}
			if ev.Pos.Ordinal != 0 || !last.Less(ev.Pos) {
				bad("a reset not after the last event (%s)", last)
			}
			seg = &watchSegment{consumer: cs.name, start: ev.Pos, state: map[string]uint64{}}
			segs = append(segs, seg)
			view, listing, last = map[string]uint64{}, ev.Listed, ev.Pos
		case client.EventListed:
			if listing == 0 || ev.Pos != seg.start {
				bad("a listed key outside a listing")
			}
			if _, ok := view[ev.Key]; ok {
				bad("listed twice")
			}
			view[ev.Key] = ev.Generation
			if listing--; listing == 0 {
				seg.state = maps.Clone(view)
			}
		case client.EventStored, client.EventRemoved:
			if listing > 0 || !last.Less(ev.Pos) || ev.Pos.Ordinal == 0 {
				bad("out of order after %s (%d listed keys to come)", last, listing)
			}
			g, ok := view[ev.Key]
			if ev.Kind == client.EventStored && ok {
				bad("stored while stored (generation %d)", g)
			}
			if ev.Kind == client.EventRemoved && (!ok || g != ev.Generation) {
				bad("removed in generation %d while stored %v in %d", ev.Generation, ok, g)
			}
			if ev.Kind == client.EventRemoved && ev.Cause != "removed" {
				bad("cause %q: this tier only removes through Remove", ev.Cause)
			}
			applyEvent(view, ev)
			seg.evs = append(seg.evs, ev)
			last = ev.Pos
		default:
			bad("unknown kind")
		}
	}
	if listing > 0 {
		t.Fatalf("consumer %s: the stream ends with %d listed keys to come", cs.name, listing)
	}
	return segs, view
}

// checkWatch is the tier's checker (the comment at the top of this file).
func checkWatch(t *testing.T, h *watchHistory, consumers []*watchConsumer, finals []map[string]uint64, fence string) {
	t.Helper()
	var segs []*watchSegment
	views := map[string]map[string]uint64{}
	resets := map[string]int{}
	for _, cs := range consumers {
		s, v := segments(t, cs)
		segs = append(segs, s...)
		views[cs.name], resets[cs.name] = v, len(s)-1
	}
	if resets["ref"] > 0 {
		t.Fatalf("the reference consumer, on a member never compacted nor cut off, was reset %d times", resets["ref"])
	}

	// T: one position, one event, on every stream.
	truth := map[client.Position]client.Event{}
	for _, s := range segs {
		for _, ev := range s.evs {
			ev.Node = "" // the owner is checked by no rule here
			if prev, ok := truth[ev.Pos]; ok && prev != ev {
				t.Fatalf("at %s consumer %s saw %s %q generation %d, another %s %q generation %d", ev.Pos, s.consumer,
					ev.Kind, ev.Key, ev.Generation, prev.Kind, prev.Key, prev.Generation)
			}
			truth[ev.Pos] = ev
		}
	}
	order := slices.SortedFunc(maps.Keys(truth), func(a, b client.Position) int {
		if a.Less(b) {
			return -1
		}
		if b.Less(a) {
			return 1
		}
		return 0
	})
	// count returns the T events in (from, to].
	count := func(from, to client.Position) int {
		lo, _ := slices.BinarySearchFunc(order, from, cmpPos)
		if lo < len(order) && order[lo] == from {
			lo++
		}
		hi, found := slices.BinarySearchFunc(order, to, cmpPos)
		if found {
			hi++
		}
		return max(0, hi-lo)
	}

	// No skip: every segment holds every T event in its range.
	for _, s := range segs {
		if n := count(s.start, s.end()); n != len(s.evs) {
			t.Fatalf("consumer %s skipped events: %d between %s and %s, the other streams have %d", s.consumer, len(s.evs), s.start, s.end(), n)
		}
	}

	// A reset's listing is the state at its position, from a segment that covers it.
	checked, unchecked := 0, 0
	for _, r := range segs {
		if r.start == (client.Position{}) {
			continue
		}
		before := client.Position{}
		if i, _ := slices.BinarySearchFunc(order, r.start, cmpPos); i > 0 {
			before = order[i-1]
		}
		var cover *watchSegment
		for _, g := range segs {
			if g != r && !r.start.Less(g.start) && (!g.start.Less(before) || !g.end().Less(before)) {
				cover = g
				break
			}
		}
		if cover == nil {
			unchecked++
			continue
		}
		if want := cover.stateAt(r.start); !maps.Equal(r.state, want) {
			t.Fatalf("consumer %s's reset at %s listed %d keys; the state there (consumer %s's stream from %s) has %d: %s",
				r.consumer, r.start, len(r.state), cover.consumer, cover.start, len(want), diffKeys(r.state, want))
		}
		checked++
	}
	if unchecked > 0 {
		t.Fatalf("%d resets cannot be checked: no stream covers their positions", unchecked)
	}

	// Acknowledged requests against T.
	storedAt, removedAt := map[string]client.Position{}, map[string]client.Position{}
	for _, p := range order {
		ev := truth[p]
		at := storedAt
		if ev.Kind == client.EventRemoved {
			at = removedAt
		}
		if q, ok := at[ev.Key]; ok {
			t.Fatalf("%s %s at %s and at %s: every key is offloaded once and removed once", ev.Key, ev.Kind, q, p)
		}
		at[ev.Key] = p
	}
	tried, removeTried, failed := map[string]bool{}, map[string]bool{}, map[string]bool{}
	type span struct {
		call, ret int64
		lo, hi    client.Position
		what      string
	}
	var spans []span
	for _, op := range h.ops {
		for _, k := range op.keys {
			if op.remove {
				removeTried[k] = true
			} else {
				tried[k] = true
			}
		}
		for _, k := range op.failed {
			failed[k] = true
		}
		if len(op.acked) == 0 {
			continue
		}
		sp := span{call: op.call, ret: op.ret, what: fmt.Sprintf("remove %v", op.acked)}
		at := removedAt
		if !op.remove {
			sp.what, at = fmt.Sprintf("offload %v", op.acked), storedAt
		}
		var prev client.Position
		for i, k := range op.acked {
			p, ok := at[k]
			if !ok {
				t.Fatalf("I2: the acknowledged %s: %s never appears in any stream", sp.what, k)
			}
			if op.remove {
				if s, ok := storedAt[k]; !ok || !s.Less(p) {
					t.Fatalf("%s removed at %s, stored at %s (%v)", k, p, s, ok)
				}
			}
			if i > 0 && p.Index == prev.Index && !prev.Less(p) {
				t.Fatalf("the keys of %s appear out of their batch order at index %d", sp.what, p.Index)
			}
			prev = p
			if i == 0 || p.Less(sp.lo) {
				sp.lo = p
			}
			if sp.hi.Less(p) {
				sp.hi = p
			}
		}
		spans = append(spans, sp)
	}
	for k, p := range storedAt {
		if !tried[k] || failed[k] {
			t.Fatalf("%s stored at %s: no writer offloaded it, or its offload was refused", k, p)
		}
	}
	for k, p := range removedAt {
		if !removeTried[k] {
			t.Fatalf("%s removed at %s: no writer removed it", k, p)
		}
	}
	// Commit order: a request acknowledged before another was sent comes first.
	slices.SortFunc(spans, func(a, b span) int { return int(a.call - b.call) })
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			if a.ret < b.call && !a.hi.Less(b.lo) {
				t.Fatalf("commit order: %s (acknowledged at tick %d, at %s) appears after %s (sent at tick %d, at %s)",
					a.what, a.ret, a.hi, b.what, b.call, b.lo)
			}
		}
	}

	// The final state: T's, every consumer's view and every member's listing agree.
	state := map[string]uint64{}
	for _, p := range order {
		applyEvent(state, truth[p])
	}
	if _, ok := state[fence]; !ok {
		t.Fatalf("the fence %s is not in the final state of the streams", fence)
	}
	for name, v := range views {
		if !maps.Equal(v, state) {
			t.Fatalf("consumer %s ends with %d keys, the streams' final state has %d: %s", name, len(v), len(state), diffKeys(v, state))
		}
	}
	for i, f := range finals {
		if !maps.Equal(f, state) {
			t.Fatalf("member %d lists %d keys, the streams' final state has %d: %s", i+1, len(f), len(state), diffKeys(f, state))
		}
	}
	totals.checks += len(order) + checked + len(spans)
	names := make([]string, 0, len(consumers))
	for _, cs := range consumers {
		names = append(names, fmt.Sprintf("%s %d events (%d resets)", cs.name, len(cs.evs), resets[cs.name]))
	}
	t.Logf("%d events on the streams (%d stored, %d removed), %d acknowledged requests, %d resets checked; %s",
		len(order), len(storedAt), len(removedAt), len(spans), checked, strings.Join(names, ", "))
}

func cmpPos(a, b client.Position) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	}
	return 0
}

// diffKeys names up to five keys on which a and b differ.
func diffKeys(a, b map[string]uint64) string {
	var out []string
	for k, g := range a {
		if h, ok := b[k]; !ok || h != g {
			out = append(out, fmt.Sprintf("%s (%d, %d %v)", k, g, h, ok))
		}
	}
	for k, h := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s (absent, %d)", k, h))
		}
	}
	slices.Sort(out)
	return strings.Join(out[:min(5, len(out))], ", ")
}
