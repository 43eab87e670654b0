package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
)

// The invariants of a cluster world. After every recovery of a member, on that member: I5
// (its WAL has no unresolved intent), I4 and I12 for its own disk (every record on it is
// referenced by an entry the member owns; its live bytes are those entries' bytes), its
// FSM (caught up by recovery's barrier) against the client's model (I2, no resurrection),
// and a read of every key through it (I2, I3; a key whose owner is down or cut off may
// answer Unavailable, and a removed key may be a stale hit with its right bytes). As entries are applied: I6
// and I7 (ledger). At the end of the world, once the network is whole: every member's FSM
// has the same hash at the same applied index (I6), the per-member checks on every member,
// I1 (every live entry reads back), and every key read through every member with no
// Unavailable allowed.

// removedWhileReading is txn's reason for a read whose entry changed while it read.
const removedWhileReading = "removed while reading"

// convergeTime bounds how long the final check waits for the members' FSMs to agree.
const convergeTime = 30 * time.Second

// checkMember checks m just recovered.
func (c *cluster) checkMember(ctx context.Context, m *member) error {
	checks, err := c.memberChecks(ctx, m, false)
	c.s.stats.InvariantChecks += checks
	return err
}

// memberChecks checks I5 (unless strict), I4 and I12 on m, then reads every key through it
// (strict: at the end of the world, no Unavailable answer allowed).
func (c *cluster) memberChecks(ctx context.Context, m *member, strict bool) (int, error) {
	m.mu.RLock()
	log, mctx := m.log, m.ctx
	m.mu.RUnlock()
	if log == nil {
		return 0, nil
	}
	checks := 0
	if !strict { // just recovered (a running member may have a DONE queued)
		checks++
		if open, err := Unresolved(log); err != nil {
			return checks, fmt.Errorf("%s: replay WAL: %w", m.id, err)
		} else if open > 0 {
			return checks, violation{"I5", m.id, fmt.Sprintf("%d intents unresolved after recovery", open)}
		}
	}
	n, err := c.ownStructure(m)
	checks += n
	if err != nil || m.d.powerOff() {
		return checks, err
	}
	if !strict {
		n, err := c.caughtUp(m)
		checks += n
		if err != nil && !m.d.powerOff() {
			return checks, err
		}
	}
	_, coord := m.live()
	if coord == nil {
		return checks, nil
	}
	res, err := c.readAll(mctx, coord, strict)
	if err != nil {
		if strict && !m.d.powerOff() {
			return checks, fmt.Errorf("%s: read every key: %w", m.id, err)
		}
		return checks, nil
	}
	n, err = c.judgeAll(m, res, strict)
	if err != nil && strict {
		err = fmt.Errorf("%w\n%s", err, c.describe())
	}
	return checks + n, err
}

// readAll reads every key through coord. Strict, it reads again, for up to convergeTime,
// while a key answers Unavailable: a Raft leader backs off from a follower whose
// AppendEntries failed (up to tens of seconds after a long cut), so a member healed a moment
// ago may not learn the commit index a read index needs in one client deadline.
func (c *cluster) readAll(ctx context.Context, coord interface {
	BatchGet(context.Context, []string) ([]kvoffload.GetResult, error)
}, strict bool) ([]kvoffload.GetResult, error) {
	deadline := time.Now().Add(convergeTime)
	for {
		rctx, cancel := context.WithTimeout(ctx, clientDeadline)
		res, err := coord.BatchGet(rctx, c.s.keys)
		cancel()
		unavailable := slices.ContainsFunc(res, func(r kvoffload.GetResult) bool { return r.Status == kvoffload.Unavailable })
		if !strict || err == nil && !unavailable || time.Now().After(deadline) {
			return res, err
		}
		time.Sleep(leaderRetry)
	}
}

// ownStructure checks I4 and I12 on m's disk, polling for up to convergeTime (virtual time)
// while the reclaimer frees what other members' commands released and the background
// resolver gets the ABORT of a failed transaction through (it backs off while the cluster
// has no leader, and the extents it reserved stay live until the ABORT is applied).
func (c *cluster) ownStructure(m *member) (int, error) {
	deadline := time.Now().Add(convergeTime)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		checks, err := c.ownStructureOnce(m)
		if err == nil || m.d.powerOff() {
			return checks, nil
		}
		if time.Now().After(deadline) {
			return checks, fmt.Errorf("%s: %w", m.id, err)
		}
		time.Sleep(wait)
	}
}

func (c *cluster) ownStructureOnce(m *member) (int, error) {
	m.mu.RLock()
	f, data := m.f, m.data
	m.mu.RUnlock()
	if data == nil {
		return 0, nil
	}
	own := map[string]fsm.Entry{}
	var live int64
	f.ForEach(func(e fsm.Entry) bool {
		if e.Owner == m.id {
			own[e.Key] = e
			live += e.Extent.Length
		}
		return true
	})
	st, err := data.Stats()
	if err != nil {
		return 0, fmt.Errorf("bucket stats: %w", err)
	}
	checks := 1
	var errs []error
	if st.LiveBytes != live {
		errs = append(errs, violation{"I12", m.id, fmt.Sprintf("live bytes %d, its entries reference %d", st.LiveBytes, live)})
	}
	err = data.Scan(func(ext bucketstore.Extent, h bucketstore.Header, err error) error {
		if err != nil {
			return nil
		}
		checks++
		e, ok := own[h.Key]
		if !ok || e.Extent != (fsm.Extent{Bucket: ext.Bucket, Offset: ext.Offset, Length: ext.Length}) {
			errs = append(errs, violation{"I4", h.Key, fmt.Sprintf("record on %s at %+v that no entry of it references", m.id, ext)})
		}
		return nil
	})
	if err != nil {
		return checks, fmt.Errorf("scan buckets: %w", err)
	}
	return checks, errors.Join(errs...)
}

// judgeAll judges reads through m against the model. Unless strict (the end of a world):
// an Unavailable answer tells nothing (an owner down or cut off), and a key the model holds
// absent may read Found with its right bytes, from a replica that has not applied its
// removal yet (docs/design.md, "The read index": a hit is not confirmed). Strict, it also
// checks I1 against m's FSM.
func (c *cluster) judgeAll(m *member, res []kvoffload.GetResult, strict bool) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	checks := 0
	var errs []error
	for _, r := range res {
		st := c.model.keys[r.Key]
		switch {
		case strict:
		case r.Status == kvoffload.Unavailable:
			continue
		case st == absent && r.Status == kvoffload.Found:
			st = uncertain // a stale hit: only its bytes are judged
		case r.Status == kvoffload.NotFound && r.Reason == removedWhileReading:
			// The entry changed between the lookup and the read: a member's background
			// resolution re-committed the key (a new txn ID). Known, reported: the read
			// does not look the key up again.
			c.s.trace("%s: %s read NotFound, %s", m.id, r.Key, r.Reason)
			continue
		}
		checks++
		if err := c.s.judge(r, st); err != nil {
			errs = append(errs, fmt.Errorf("read through %s: %w", m.id, err))
		}
		if strict {
			checks++
			if _, ok := m.f.Lookup(r.Key); ok != (r.Status == kvoffload.Found) && r.Status != kvoffload.Corrupt {
				errs = append(errs, violation{"I1", r.Key, fmt.Sprintf("in %s's metadata: %v, read %s (%s)", m.id, ok, r.Status, r.Reason)})
			}
		}
	}
	return checks, errors.Join(errs...)
}

// caughtUp checks m's FSM, just caught up by its recovery's barrier, against the model: no
// key acknowledged removed is live in it (no resurrection), every key acknowledged stored
// is (I2).
func (c *cluster) caughtUp(m *member) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	checks := 0
	var errs []error
	for _, k := range c.s.keys {
		st := c.model.keys[k]
		if st != absent && st != present {
			continue
		}
		checks++
		if _, live := m.f.Lookup(k); live && st == absent {
			errs = append(errs, violation{"resurrection", k, fmt.Sprintf("acknowledged removed, live in %s's metadata after its recovery", m.id)})
		} else if !live && st == present {
			errs = append(errs, violation{"I2", k, fmt.Sprintf("acknowledged stored, not in %s's metadata after its recovery", m.id)})
		}
	}
	return checks, errors.Join(errs...)
}

// final checks the cluster at the end of the world: the FSMs converge (I6), then every
// member's checks, strict.
func (c *cluster) final(ctx context.Context) (int, error) {
	checks := 0
	deadline := time.Now().Add(convergeTime)
	for {
		bctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = clusterMeta{c.ms[0], c.ms[0].f}.Barrier(bctx)
		cancel()
		index, hash, same := c.ms[0].f.AppliedIndex(), c.ms[0].f.Hash(), true
		for _, m := range c.ms[1:] {
			same = same && m.f.AppliedIndex() == index && m.f.Hash() == hash
		}
		checks++
		if same {
			break
		}
		if time.Now().After(deadline) {
			var at []string
			for _, m := range c.ms {
				at = append(at, fmt.Sprintf("%s applied %d hash %x", m.id, m.f.AppliedIndex(), m.f.Hash()))
			}
			return checks, violation{"I6", "-", fmt.Sprintf("the FSMs did not converge in %v: %v", convergeTime, at)}
		}
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	for _, m := range c.ms {
		n, err := c.memberChecks(ctx, m, true)
		checks += n
		errs = append(errs, err)
	}
	return checks, errors.Join(errs...)
}

// describe is the cluster's state, for a failure's message.
func (c *cluster) describe() string {
	out := ""
	for _, m := range c.ms {
		node, _ := m.live()
		state, leader := "down", ""
		if node != nil {
			state = node.State()
			leader, _ = node.Leader()
		}
		c.nw.mu.Lock()
		out += fmt.Sprintf("  %s: %s, leader %q, net down %v, cut %v, applied %d\n", m.id, state, leader, c.nw.down[m.i], c.nw.cut[m.i], m.f.AppliedIndex())
		c.nw.mu.Unlock()
	}
	return out
}
