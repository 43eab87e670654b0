package txn

import (
	"context"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
)

// BatchExists reports, per key, whether it is committed (Present), being written (InFlight),
// neither (Absent), or could not be confirmed (Unknown), and the number of leading Present
// keys. It reads local metadata, which on a cluster member may lag the leader by a few
// milliseconds; every key that is not Present locally (Absent, and InFlight too: this node's
// own write of a key may be joined to one another member already acknowledged) is looked up
// again after a read index (see BatchGet), so a key acknowledged through any node before the
// call is Present. If the read index fails within ReadIndexTimeout, those keys are Unknown
// and Reason says why: a node that cannot confirm never answers "not stored" for a stored
// key, the failure of Mooncake issue #2827 (docs/design.md, "The read index").
func (c *Coordinator) BatchExists(ctx context.Context, keys []string) kvoffload.ExistsResult {
	return c.BatchExistsLease(ctx, keys, 0)
}

// BatchExistsLease is BatchExists that also pins, for lease, the Present keys whose bytes
// this node owns: eviction skips them until the lease ends, so a caller that saw Present can
// read them in that time (cases.md C11 with eviction running). Keys owned by other nodes are
// reported but not pinned. Remove still removes a leased key. A lease longer than MaxLease
// is shortened to it.
func (c *Coordinator) BatchExistsLease(ctx context.Context, keys []string, lease time.Duration) kvoffload.ExistsResult {
	res := c.batchExists(keys, nil)
	var unsure []int
	for i, p := range res.Keys {
		if p != kvoffload.Present {
			unsure = append(unsure, i)
		}
	}
	if len(unsure) > 0 {
		if err := c.confirmMisses(ctx, keys, unsure, make([]fsm.Entry, len(keys))); err != nil {
			for _, i := range unsure {
				res.Keys[i] = kvoffload.Unknown
			}
			res.Reason = "not confirmed: this node's metadata could not be brought up to date with the leader's: " + err.Error()
			res.PrefixPresent = kvoffload.LeadingPresent(res.Keys)
		} else {
			res = c.batchExists(keys, res.Keys)
		}
	}
	if lease > 0 {
		c.leasePresent(keys, &res, time.Now().Add(min(lease, c.cfg.MaxLease)))
	}
	return res
}

// leasePresent leases the Present keys this node owns until until. A key an eviction has
// already chosen, or removed since it was looked up, is reported Absent instead: a Present
// answer with a lease must stay readable for the lease (cases.md C11).
func (c *Coordinator) leasePresent(keys []string, res *kvoffload.ExistsResult, until time.Time) {
	for i, k := range keys {
		if res.Keys[i] != kvoffload.Present {
			continue
		}
		if e, ok := c.meta.Lookup(k); !ok {
			res.Keys[i] = kvoffload.Absent // removed since it was looked up
		} else if e.Owner == c.cfg.NodeID {
			// Lease, then look again: a key still live in the same version after a lease
			// that took cannot be chosen by an eviction until the lease ends.
			leased := c.ev.lru.lease(k, until)
			if cur, still := c.meta.Lookup(k); !leased || !still || cur.Gen != e.Gen {
				res.Keys[i] = kvoffload.Absent
			}
		}
	}
	res.PrefixPresent = kvoffload.LeadingPresent(res.Keys)
}

// batchExists classifies keys from local metadata and the in-flight table; with prev set,
// only the keys prev does not have Present are looked up again (after a read index).
func (c *Coordinator) batchExists(keys []string, prev []kvoffload.Presence) kvoffload.ExistsResult {
	res := kvoffload.ExistsResult{Keys: make([]kvoffload.Presence, len(keys))}
	c.inflight.mu.Lock()
	defer c.inflight.mu.Unlock()
	present := func(k string) bool { _, ok := c.meta.Lookup(k); return ok }
	for i, k := range keys {
		switch {
		case prev != nil && prev[i] == kvoffload.Present, present(k):
			res.Keys[i] = kvoffload.Present
		case c.inflight.flights[k] != nil:
			res.Keys[i] = kvoffload.InFlight
		default:
			res.Keys[i] = kvoffload.Absent
		}
	}
	res.PrefixPresent = kvoffload.LeadingPresent(res.Keys)
	return res
}

// CatchUp brings this node's metadata up to date with the leader's (Meta.ReadIndex, bounded by
// ReadIndexTimeout; free on a single node), so that what Lookup answers next reflects every
// write acknowledged before the call, through any node. The offload precheck needs it: a
// Present seen in lagging metadata would answer AlreadyStored for a key removed meanwhile
// (chaos/TestProcessNemesis found it).
func (c *Coordinator) CatchUp(ctx context.Context) error {
	return c.catchUp(ctx, c.cfg.ReadIndexTimeout)
}

// OffloadCatchUp is CatchUp before a batch offload or its precheck, bounded by
// OffloadCatchUpTimeout (at least ReadIndexTimeout): it rides out a leader election.
func (c *Coordinator) OffloadCatchUp(ctx context.Context) error {
	return c.catchUp(ctx, max(c.cfg.OffloadCatchUpTimeout, c.cfg.ReadIndexTimeout))
}

func (c *Coordinator) catchUp(ctx context.Context, bound time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	return c.meta.ReadIndex(rctx)
}
