package client

import (
	"context"
	"fmt"
	"math"
	"time"

	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// BatchExists reports, per key in request order, whether it is Present, Absent, InFlight or
// Unknown (the member could not confirm it; ExistsResult.Reason says why), and how many
// leading keys are Present. lease asks the node that answers to pin the present objects whose
// bytes it owns against eviction for that long; 0 asks for no lease. A key that is not valid
// UTF-8 is Absent (no object can have it) and is not sent.
func (c *Client) BatchExists(ctx context.Context, keys []string, lease time.Duration) (ExistsResult, error) {
	var reason string
	ps, err := sendOnly(keys, self, func(string) Presence { return Absent }, func(keys []string) ([]Presence, error) {
		got, err := c.batchExists(ctx, keys, lease)
		reason = got.Reason
		return got.Keys, err
	})
	if err != nil {
		return ExistsResult{}, err
	}
	// Counted here, not taken from the member: the prefix ends at the first key that is not
	// Present, whatever a member that predates Unknown would count.
	return ExistsResult{Keys: ps, PrefixPresent: leadingPresent(ps), Reason: reason}, nil
}

// batchExists runs BatchExists for keys that can all be sent; PrefixPresent is left to the
// caller.
func (c *Client) batchExists(ctx context.Context, keys []string, lease time.Duration) (ExistsResult, error) {
	req := &kvoffloadv1.ExistsRequest{Keys: keys, LeaseMs: uint32(min(max(lease.Milliseconds(), 0), math.MaxUint32))}
	var out ExistsResult
	err := c.retry(ctx, "BatchExists", false, func(ctx context.Context, a *attempt) error {
		resp, err := a.m.kv.BatchExists(ctx, req)
		if err != nil {
			return err
		}
		if len(resp.GetKeys()) != len(keys) {
			return fmt.Errorf("%w: BatchExists: %d answers for %d keys", ErrProtocol, len(resp.GetKeys()), len(keys))
		}
		out = ExistsResult{Keys: make([]Presence, len(keys)), Reason: resp.GetReason()}
		for i, p := range resp.GetKeys() {
			out.Keys[i] = presence(p)
		}
		return nil
	})
	return out, err
}

// leadingPresent counts the Present keys before the first one that is not.
func leadingPresent(ps []Presence) int {
	for i, p := range ps {
		if p != Present {
			return i
		}
	}
	return len(ps)
}

// presence maps the wire's Presence; a value the client does not know claims nothing, so it
// is Unknown.
func presence(p kvoffloadv1.Presence) Presence {
	switch p {
	case kvoffloadv1.Presence_PRESENCE_PRESENT:
		return Present
	case kvoffloadv1.Presence_PRESENCE_ABSENT:
		return Absent
	case kvoffloadv1.Presence_PRESENCE_IN_FLIGHT:
		return InFlight
	}
	return Unknown
}

// Remove deletes keys and reports, per key in request order, whether it was removed (false:
// it was not committed). A retried call reports false for a key the lost attempt removed. A
// key that is not valid UTF-8 is false (no object can have it) and is not sent.
func (c *Client) Remove(ctx context.Context, keys []string) ([]bool, error) {
	return sendOnly(keys, self, func(string) bool { return false },
		func(keys []string) ([]bool, error) { return c.remove(ctx, keys) })
}

// remove runs Remove for keys that can all be sent.
func (c *Client) remove(ctx context.Context, keys []string) ([]bool, error) {
	var out []bool
	id := NewTxnID() // the same ID on every retry: the server applies the removal once
	err := c.retry(ctx, "Remove", true, func(ctx context.Context, a *attempt) error {
		resp, err := a.m.kv.Remove(ctx, &kvoffloadv1.RemoveRequest{Keys: keys, TxnId: id[:]})
		if err != nil {
			return err
		}
		if len(resp.GetRemoved()) != len(keys) {
			return fmt.Errorf("%w: Remove: %d answers for %d keys", ErrProtocol, len(resp.GetRemoved()), len(keys))
		}
		out = resp.GetRemoved()
		return nil
	})
	return out, err
}

// Stats returns the counters and space accounting of the member the client talks to.
func (c *Client) Stats(ctx context.Context) (*kvoffloadv1.StatsResponse, error) {
	var out *kvoffloadv1.StatsResponse
	err := c.retry(ctx, "Stats", false, func(ctx context.Context, a *attempt) error {
		var err error
		out, err = a.m.kv.Stats(ctx, &kvoffloadv1.StatsRequest{})
		return err
	})
	return out, err
}

// Status describes the cluster: its members, the leader, and keys and bytes per node
// (KVOffload.Status on the member's API listener).
func (c *Client) Status(ctx context.Context) (*kvoffloadv1.StatusResponse, error) {
	var out *kvoffloadv1.StatusResponse
	err := c.retry(ctx, "Status", false, func(ctx context.Context, a *attempt) error {
		var err error
		out, err = a.m.kv.Status(ctx, &kvoffloadv1.StatusRequest{})
		return err
	})
	return out, err
}
