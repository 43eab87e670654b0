package client

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kvoffload/kvoffload"
	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/internal/wire"
)

// BatchExists reports, per key in request order, whether it is Present, Absent, InFlight or
// Unknown (the member could not confirm it; ExistsResult.Reason says why), and how many
// leading keys are Present (kvoffload.Store). lease asks the node that answers to pin the
// present objects whose bytes it owns against eviction for that long; 0 asks for no lease. A
// key that CheckKey refuses is Absent (no object can have it) and is not sent.
//
// Errors: kvoffload.ErrUnavailable (with the context's error) when no member answered in
// time, ErrTooLarge (over MaxBatchKeys), ErrDenied, ErrClosed, ErrProtocol.
func (c *Client) BatchExists(ctx context.Context, keys []string, lease time.Duration) (kvoffload.ExistsResult, error) {
	if err := c.checkKeys("BatchExists", len(keys), func(i int) string { return keys[i] }); err != nil {
		return kvoffload.ExistsResult{}, err
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	var reason string
	ps, err := sendOnly(keys, self, func(string) kvoffload.Presence { return kvoffload.Absent }, func(keys []string) ([]kvoffload.Presence, error) {
		got, err := c.batchExists(ctx, keys, lease)
		reason = got.Reason
		return got.Keys, err
	})
	if err != nil {
		return kvoffload.ExistsResult{}, err
	}
	// Counted here, not taken from the member: the prefix ends at the first key that is not
	// Present, whatever a member that predates Unknown would count.
	return kvoffload.ExistsResult{Keys: ps, PrefixPresent: kvoffload.LeadingPresent(ps), Reason: reason}, nil
}

// batchExists runs BatchExists for keys that can all be sent; PrefixPresent is left to the
// caller.
func (c *Client) batchExists(ctx context.Context, keys []string, lease time.Duration) (kvoffload.ExistsResult, error) {
	req := &kvoffloadv1.ExistsRequest{Keys: keys, LeaseMs: uint32(min(max(lease.Milliseconds(), 0), math.MaxUint32))}
	var out kvoffload.ExistsResult
	err := c.retry(ctx, "BatchExists", false, func(ctx context.Context, a *attempt) error {
		resp, err := a.m.kv.BatchExists(ctx, req)
		if err != nil {
			return err
		}
		if len(resp.GetKeys()) != len(keys) {
			return fmt.Errorf("%w: BatchExists: %d answers for %d keys", kvoffload.ErrProtocol, len(resp.GetKeys()), len(keys))
		}
		out = kvoffload.ExistsResult{Keys: make([]kvoffload.Presence, len(keys)), Reason: resp.GetReason()}
		for i, p := range resp.GetKeys() {
			out.Keys[i] = wire.PresenceFromPB(p)
		}
		return nil
	})
	return out, err
}

// Remove deletes keys and reports, per key in request order, whether it was removed (false:
// it was not committed) (kvoffload.Store). Every attempt carries the same txn ID, so the
// cluster applies the removal once; a retried call reports false for a key the lost attempt
// removed. A key that CheckKey refuses is false (no object can have it) and is not sent.
//
// Errors: kvoffload.ErrUnavailable (with the context's error) when the removal could not be
// confirmed in time: some keys may be removed; Remove is idempotent, call it again.
// ErrTooLarge (over MaxBatchKeys), ErrDenied, ErrClosed, ErrProtocol.
func (c *Client) Remove(ctx context.Context, keys []string) ([]kvoffload.RemoveResult, error) {
	if err := c.checkKeys("Remove", len(keys), func(i int) string { return keys[i] }); err != nil {
		return nil, err
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	removed, err := sendOnly(keys, self, func(string) bool { return false },
		func(keys []string) ([]bool, error) { return c.remove(ctx, keys) })
	if err != nil {
		return nil, err
	}
	out := make([]kvoffload.RemoveResult, len(keys))
	for i, k := range keys {
		out[i] = kvoffload.RemoveResult{Key: k, Removed: removed[i]}
	}
	return out, nil
}

// remove runs Remove for keys that can all be sent.
func (c *Client) remove(ctx context.Context, keys []string) ([]bool, error) {
	var out []bool
	id := kvoffload.NewTxnID() // the same ID on every retry: the server applies the removal once
	err := c.retry(ctx, "Remove", false, func(ctx context.Context, a *attempt) error {
		resp, err := a.m.kv.Remove(ctx, &kvoffloadv1.RemoveRequest{Keys: keys, TxnId: id[:]})
		if err != nil {
			return err
		}
		if len(resp.GetRemoved()) != len(keys) {
			return fmt.Errorf("%w: Remove: %d answers for %d keys", kvoffload.ErrProtocol, len(resp.GetRemoved()), len(keys))
		}
		out = resp.GetRemoved()
		return nil
	})
	return out, err
}

// Stats returns the counters and space accounting of the member the client talks to
// (kvoffload.Store). Errors: kvoffload.ErrUnavailable, ErrDenied, ErrClosed.
func (c *Client) Stats(ctx context.Context) (kvoffload.Stats, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	var out kvoffload.Stats
	err := c.retry(ctx, "Stats", false, func(ctx context.Context, a *attempt) error {
		resp, err := a.m.kv.Stats(ctx, &kvoffloadv1.StatsRequest{})
		if err == nil {
			out = wire.StatsFromPB(resp)
		}
		return err
	})
	return out, err
}

// Status describes the cluster: its members, the leader, and keys and bytes per node
// (KVOffload.Status on the member's API listener). Errors: kvoffload.ErrUnavailable,
// ErrDenied, ErrClosed.
func (c *Client) Status(ctx context.Context) (ClusterStatus, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	var out ClusterStatus
	err := c.retry(ctx, "Status", false, func(ctx context.Context, a *attempt) error {
		var hdr metadata.MD
		resp, err := a.m.kv.Status(ctx, &kvoffloadv1.StatusRequest{}, grpc.Header(&hdr))
		if err == nil {
			out = clusterStatus(resp)
			out.Refusing = strings.Join(hdr.Get(wire.RefusingHeader), "; ")
		}
		return err
	})
	return out, err
}
