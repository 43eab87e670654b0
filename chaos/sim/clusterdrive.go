package sim

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand"
	"slices"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/txn"
)

// Faults of a cluster world, from the seed: a member's power fails at a persistence point of
// its disk or its Raft log (one life in two has a crash point, drawn from
// [1, clusterWindow]), the leader's power fails between two rounds (one round in two), and
// the network is cut (one operation in netFaultOdds, while whole) and healed (one in
// healOdds, while cut). A member whose power failed, that fail-stopped or whose Raft log
// could not be written is restarted at once on what its disk and Raft log kept, and
// recovers.
const (
	clusterWindow = 160
	netFaultOdds  = 10
	healOdds      = 4
	maxRestarts   = 24 // lives of one member per restart before the seed fails
	// clientDeadline bounds one client operation, as a client's deadline does.
	clientDeadline = 5 * time.Second
)

// runCluster runs one seed on a cluster of opt.Members: opt.Epochs rounds of opt.Ops client
// operations, each through a member the seed picks, then the final checks.
func (s *sim) runCluster(ctx context.Context) error {
	// Raft's election timeouts come from math/rand's global source; seeding it is what
	// makes them the seed's (a no-op unless GODEBUG=randseednop=0, as scripts/sim.sh sets).
	mathrand.Seed(int64(s.opt.Seed)) //nolint:staticcheck // the only seed of Raft's source
	c, err := newCluster(s, s.opt.Members)
	if err != nil {
		return err
	}
	defer func() {
		for _, m := range c.ms {
			m.close()
		}
		c.nw.mu.Lock()
		s.stats.Drops += c.nw.drops
		c.nw.mu.Unlock()
	}()
	for _, m := range c.ms {
		if err := m.start(ctx, c.crashPoint(m)); err != nil && !m.d.powerOff() {
			return c.fail(0, err)
		}
	}
	for _, m := range c.ms {
		if m.up && m.broken() == "" {
			if err := m.recover(); err != nil && !m.d.powerOff() {
				if err := c.restart(ctx, m, err.Error()); err != nil {
					return c.fail(0, err)
				}
			}
		}
	}
	if err := c.settle(ctx); err != nil {
		return c.fail(0, err)
	}
	for round := range s.opt.Epochs {
		for range s.opt.Ops {
			c.netFault()
			m := c.ms[s.rng.IntN(len(c.ms))]
			if err := c.op(ctx, m); err != nil {
				return c.fail(round, err)
			}
			if err := c.settle(ctx); err != nil {
				return c.fail(round, err)
			}
		}
		if s.crashRng.IntN(2) == 0 {
			c.killLeader()
			if err := c.settle(ctx); err != nil {
				return c.fail(round, err)
			}
		}
	}
	// The end of the world: the network heals and drops nothing more, lives no longer lose
	// power, and the final checks run until no storage fault broke a member during them.
	c.nw.heal()
	c.nw.quiet()
	c.calm = true
	for attempt := 0; ; attempt++ {
		if err := c.settle(ctx); err != nil {
			return c.fail(s.opt.Epochs, err)
		}
		checks, err := c.final(ctx)
		s.stats.InvariantChecks += checks
		if err == nil || attempt == maxRestarts || !c.anyBroken() {
			return c.fail(s.opt.Epochs, err)
		}
	}
}

// anyBroken reports whether a member's life must end.
func (c *cluster) anyBroken() bool {
	for _, m := range c.ms {
		if m.broken() != "" {
			return true
		}
	}
	return false
}

// fail wraps err (nil: nil) as the seed's Failure in round.
func (c *cluster) fail(round int, err error) error {
	if err == nil {
		return nil
	}
	return &Failure{Seed: c.s.opt.Seed, Members: len(c.ms), Epoch: round, After: "the cluster's faults", Err: err}
}

// crashPoint draws the persistence point at which m's next life loses power (0: never).
func (c *cluster) crashPoint(m *member) int {
	if m.rng.IntN(2) == 0 || c.calm {
		return 0
	}
	return 1 + m.rng.IntN(clusterWindow)
}

// settle restarts every member whose life must end, then checks the ledger. Every such
// member is started before any recovers: a recovery needs a quorum, which may need them.
func (c *cluster) settle(ctx context.Context) error {
	c.startBroken(ctx, nil)
	for _, m := range c.ms {
		var err error
		switch {
		case !m.up || m.broken() != "":
			err = c.restart(ctx, m, "down")
		case !m.recovered:
			if err = m.recover(); err == nil {
				err = c.checkMember(ctx, m)
			} else if !isViolation(err) {
				err = c.restart(ctx, m, err.Error())
			}
		}
		if err != nil {
			return err
		}
	}
	err, n := c.ledger.failed()
	c.s.stats.InvariantChecks += n
	return err
}

// startBroken ends the life of every member but skip whose life must end, and starts its
// next (recovered later, by settle).
func (c *cluster) startBroken(ctx context.Context, skip *member) {
	for _, m := range c.ms {
		if why := m.broken(); m != skip && (why != "" || !m.up) {
			m.close()
			c.account(m, why)
			_ = m.start(ctx, c.crashPoint(m))
		}
	}
}

// restart ends m's life and opens the next on what its disk and Raft log kept, until a life
// opens and recovers; then it checks m.
func (c *cluster) restart(ctx context.Context, m *member, why string) error {
	for life := 0; ; life++ {
		if life == maxRestarts {
			return fmt.Errorf("%s: no recovery in %d lives (last: %s)", m.id, life, why)
		}
		m.close()
		c.account(m, why)
		err := m.start(ctx, c.crashPoint(m))
		if err == nil {
			err = m.recover()
		}
		switch {
		case err == nil:
			return c.checkMember(ctx, m)
		case isViolation(err):
			return err
		case m.d.powerOff():
			why = "power loss in recovery"
		default:
			// Recovery gave up (no leader it could reach, a storage fault): the network
			// heals and the member restarts, as a supervisor would restart the node.
			c.nw.heal()
			c.startBroken(ctx, m) // the quorum it waited for may need them
			c.s.stats.Exits++
			why = err.Error()
		}
	}
}

// account counts what the life of m that just ended did, and takes the disk it left.
func (c *cluster) account(m *member, why string) {
	d := m.d
	if d == nil {
		return
	}
	for kind, n := range d.faults {
		c.s.stats.Faults[kind] += n
	}
	d.faults = map[string]int{}
	if d.img == nil {
		return // a fail-stop: the process ends, the disk keeps even what was not synced
	}
	c.s.trace("%s: power loss before %s #%d (%s)", m.id, d.img.point, d.img.n, d.img.sig)
	m.mem = d.img.fs
	c.s.stats.CrashRecoveries++
	c.s.stats.CrashesByPoint[d.img.point]++
	c.s.stats.ByMembers[fmt.Sprint(len(c.ms))]++
	d.img = nil
}

// killLeader fails the leader's power now (not at a persistence point).
func (c *cluster) killLeader() {
	l, err := c.ms[0].leader()
	if err != nil {
		return
	}
	l.mu.RLock()
	d, up := l.d, l.up
	l.mu.RUnlock()
	if !up {
		return
	}
	d.mu.Lock()
	if !d.off {
		d.crashAt = d.n + 1
		_ = d.pointLocked("kill", "leader", nil)
		c.s.stats.LeaderKills++
	}
	d.mu.Unlock()
}

// netFault cuts or heals the network, as the seed draws.
func (c *cluster) netFault() {
	rng, n := c.s.crashRng, len(c.ms)
	c.nw.mu.Lock()
	whole := true
	for i := range c.nw.cut {
		whole = whole && !slices.Contains(c.nw.cut[i], true)
	}
	c.nw.mu.Unlock()
	if !whole {
		if rng.IntN(healOdds) == 0 {
			c.s.trace("network: heal")
			c.nw.heal()
		}
		return
	}
	if rng.IntN(netFaultOdds) != 0 {
		return
	}
	c.s.stats.Partitions++
	side := make([]bool, n)
	switch kind := rng.IntN(3); kind {
	case 0: // the leader alone
		l, err := c.ms[rng.IntN(n)].leader()
		if err != nil {
			return
		}
		side[l.i] = true
		c.s.trace("network: %s (leader) isolated", l.id)
	case 1: // a minority apart from the majority
		for _, i := range rng.Perm(n)[:(n-1)/2] {
			side[i] = true
		}
		c.s.trace("network: split %v", side)
	default: // one direction of one link
		i, j := rng.IntN(n), rng.IntN(n)
		if i != j {
			c.s.trace("network: m%d -> m%d cut", i, j)
			c.nw.cutOne(i, j)
		}
		return
	}
	c.nw.partition(side)
}

// op runs one client operation through m: an offload, a removal or a read, as the seed
// draws; a violated invariant is its error.
func (c *cluster) op(ctx context.Context, m *member) error {
	_, coord := m.live()
	if coord == nil {
		return nil
	}
	m.mu.RLock()
	mctx, cancel := context.WithTimeout(m.ctx, clientDeadline)
	m.mu.RUnlock()
	defer cancel()
	switch r := c.s.rng.IntN(10); {
	case r < 7:
		return c.offload(mctx, m, coord)
	case r < 9:
		return c.remove(mctx, m, coord, c.s.pick(1+c.s.rng.IntN(3)))
	default:
		return c.read(mctx, m, coord)
	}
}

// offload offloads 1-6 keys through m, or retries a batch whose outcome was unknown with
// its txn ID (through whichever member the seed picked: exactly-once across members).
func (c *cluster) offload(ctx context.Context, m *member, coord *txn.Coordinator) error {
	s := c.s
	b := s.retry
	if b == nil || s.rng.IntN(2) == 0 {
		b = &batch{id: s.txnID(), keys: s.pick(1 + s.rng.IntN(6))}
	}
	s.retry = nil
	objs := make([]kvoffload.Object, len(b.keys))
	for i, k := range b.keys {
		objs[i] = kvoffload.Object{Key: k, Value: s.payload(k)}
	}
	c.mu.Lock()
	c.model.begin(b.keys)
	c.mu.Unlock()
	res, err := coord.BatchOffload(ctx, b.id, objs)
	s.trace("%s: offload %x %v: %v %v", m.id, b.id[:4], b.keys, outcomes(res), err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && m.d.powerOff() {
		err = txn.ErrIndeterminate // a dead member's answer never reaches the client
	}
	if err != nil {
		c.model.fail(b.keys)
		if errors.Is(err, txn.ErrIndeterminate) {
			if b.decided == nil { // the first attempt's: a retry that fails again keeps it
				b.decided = make([]int, len(b.keys))
				for i, k := range b.keys {
					b.decided[i] = c.model.decided[k]
				}
			}
			s.retry = b
		}
		return nil
	}
	states := make([]keyState, len(b.keys))
	for i, r := range res {
		k := b.keys[i]
		switch {
		case b.decided != nil && c.model.decided[k] != b.decided[i]:
			// A retry whose first attempt no member recorded runs anew: the same operation
			// may take effect before or after the operations that ended on k since.
			states[i] = uncertain
		case r.Outcome.OK():
			states[i] = present
		default:
			states[i] = c.model.keys[k]
		}
	}
	c.model.end(b.keys, states)
	return nil
}

// remove removes keys through m in one transaction.
func (c *cluster) remove(ctx context.Context, m *member, coord *txn.Coordinator, keys []string) error {
	c.mu.Lock()
	c.model.begin(keys)
	c.mu.Unlock()
	res, err := coord.RemoveTxn(ctx, c.s.txnID(), keys)
	c.s.trace("%s: remove %v: %v %v", m.id, keys, res, err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil || m.d.powerOff() { // a dead member's answer never reaches the client
		c.model.fail(keys)
		return nil
	}
	var errs []error
	for _, r := range res {
		if !r.Removed && c.model.keys[r.Key] == present {
			errs = append(errs, violation{"I2", r.Key, "stored and acknowledged, but Remove through " + m.id + " did not find it"})
		}
	}
	c.model.end(keys, make([]keyState, len(keys)))
	return errors.Join(errs...)
}

// read reads 1-8 keys through m and judges each answer (Unavailable tells nothing).
func (c *cluster) read(ctx context.Context, m *member, coord *txn.Coordinator) error {
	keys := c.s.pick(1 + c.s.rng.IntN(8))
	res, err := coord.BatchGet(ctx, keys)
	if err != nil || m.d.powerOff() {
		return nil
	}
	_, err = c.judgeAll(m, res, false)
	return err
}
