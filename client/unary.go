package client

import (
	"context"
	"fmt"
	"math"
	"time"

	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// BatchExists reports, per key in request order, whether it is Present, Absent or InFlight,
// and how many leading keys are Present. lease asks the node that answers to pin the present
// objects whose bytes it owns against eviction for that long; 0 asks for no lease.
func (c *Client) BatchExists(ctx context.Context, keys []string, lease time.Duration) (ExistsResult, error) {
	req := &kvoffloadv1.ExistsRequest{Keys: keys, LeaseMs: uint32(min(max(lease.Milliseconds(), 0), math.MaxUint32))}
	var out ExistsResult
	err := c.retry(ctx, "BatchExists", false, func(ctx context.Context, m member, _ int) error {
		resp, err := m.kv.BatchExists(ctx, req)
		if err != nil {
			return err
		}
		if len(resp.GetKeys()) != len(keys) {
			return fmt.Errorf("%w: BatchExists: %d answers for %d keys", ErrProtocol, len(resp.GetKeys()), len(keys))
		}
		out = ExistsResult{Keys: make([]Presence, len(keys)), PrefixPresent: int(resp.GetPrefixPresent())}
		for i, p := range resp.GetKeys() {
			out.Keys[i] = presence(p)
		}
		return nil
	})
	return out, err
}

func presence(p kvoffloadv1.Presence) Presence {
	switch p {
	case kvoffloadv1.Presence_PRESENCE_PRESENT:
		return Present
	case kvoffloadv1.Presence_PRESENCE_ABSENT:
		return Absent
	case kvoffloadv1.Presence_PRESENCE_IN_FLIGHT:
		return InFlight
	}
	return 0
}

// Remove deletes keys and reports, per key in request order, whether it was removed (false:
// it was not committed). A retried call reports false for a key the lost attempt removed.
func (c *Client) Remove(ctx context.Context, keys []string) ([]bool, error) {
	var out []bool
	id := NewTxnID() // the same ID on every retry: the server applies the removal once
	err := c.retry(ctx, "Remove", true, func(ctx context.Context, m member, _ int) error {
		resp, err := m.kv.Remove(ctx, &kvoffloadv1.RemoveRequest{Keys: keys, TxnId: id[:]})
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
	err := c.retry(ctx, "Stats", false, func(ctx context.Context, m member, _ int) error {
		var err error
		out, err = m.kv.Stats(ctx, &kvoffloadv1.StatsRequest{})
		return err
	})
	return out, err
}

// Status describes the cluster: its members, the leader, and keys and bytes per node
// (Cluster.Status).
func (c *Client) Status(ctx context.Context) (*kvoffloadv1.StatusResponse, error) {
	var out *kvoffloadv1.StatusResponse
	err := c.retry(ctx, "Status", false, func(ctx context.Context, m member, _ int) error {
		var err error
		out, err = m.cl.Status(ctx, &kvoffloadv1.StatusRequest{})
		return err
	})
	return out, err
}
