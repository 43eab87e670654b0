package client

import (
	"context"
	"fmt"

	"github.com/kvoffload/kvoffload"
	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/internal/wire"
)

// maxValueBytes bounds the size a member may announce for one value (the protocol's values
// are at most 64 MiB; a larger announcement is a protocol violation).
const maxValueBytes = 64 << 20

// BatchGet reads keys and returns one result per key, in request order (kvoffload.Store). A
// value whose byte count differs from the size the member announced is reported Unavailable,
// never returned truncated. Calls that fail with Unavailable (or another unknown-outcome
// error, or a stream that ends before every key was answered) are retried on the next member
// until ctx ends. A key that CheckKey refuses is InvalidKey at once and not sent; the other
// keys are read.
//
// Errors: kvoffload.ErrUnavailable (with the context's error) when no member answered in
// time, ErrTooLarge (over MaxBatchKeys or MaxBatchBytes), ErrDenied, ErrClosed, ErrProtocol.
func (c *Client) BatchGet(ctx context.Context, keys []string) ([]kvoffload.GetResult, error) {
	return c.batchGetInto(ctx, keys, nil)
}

// BatchGetInto is BatchGet into caller-owned buffers (kvoffload.Store): the value of keys[i]
// is assembled in bufs[i] as it arrives, with no other copy, and GetResult.Value is
// bufs[i][:Size]. A buffer shorter than its value gives that key ShortBuffer, with Size.
// len(bufs) != len(keys) is ErrInvalidArgument. The buffers must not be used by anything
// else until the call returns; a retried attempt may write a buffer again.
func (c *Client) BatchGetInto(ctx context.Context, keys []string, bufs [][]byte) ([]kvoffload.GetResult, error) {
	if len(bufs) != len(keys) {
		return nil, fmt.Errorf("%w: BatchGetInto: %d buffers for %d keys", kvoffload.ErrInvalidArgument, len(bufs), len(keys))
	}
	return c.batchGetInto(ctx, keys, bufs)
}

func (c *Client) batchGetInto(ctx context.Context, keys []string, bufs [][]byte) ([]kvoffload.GetResult, error) {
	if err := c.checkKeys("BatchGet", len(keys), func(i int) string { return keys[i] }); err != nil {
		return nil, err
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	send, pos := partition(keys, self)
	sendBufs := bufs
	if bufs != nil && pos != nil {
		sendBufs = make([][]byte, len(pos))
		for j, i := range pos {
			sendBufs[j] = bufs[i]
		}
	}
	got, err := c.batchGet(ctx, send, sendBufs)
	if err != nil {
		return nil, err
	}
	if pos == nil {
		return got, nil
	}
	return spread(keys, got, pos, func(k string) kvoffload.GetResult {
		return kvoffload.GetResult{Key: k, Status: kvoffload.InvalidKey, Code: kvoffload.CodeInvalidKey, Reason: kvoffload.CheckKey(k) + "; not sent"}
	}), nil
}

// batchGet runs BatchGet for keys that can all be sent.
func (c *Client) batchGet(ctx context.Context, keys []string, bufs [][]byte) ([]kvoffload.GetResult, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	var out []kvoffload.GetResult
	err := c.retry(ctx, "BatchGet", false, func(ctx context.Context, a *attempt) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if a.m.local != nil {
			if res, ok, err := c.getLocal(ctx, a, keys, bufs); ok {
				if err == nil {
					out = res
				}
				return err
			}
		}
		res, err := getStream(ctx, a, keys, bufs)
		if err != nil {
			return err
		}
		out = res
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// getStream is one BatchGet attempt on the gRPC stream.
func getStream(ctx context.Context, a *attempt, keys []string, bufs [][]byte) ([]kvoffload.GetResult, error) {
	st, err := a.m.kv.BatchGet(ctx, &kvoffloadv1.GetRequest{Keys: keys})
	if err != nil {
		return nil, err
	}
	return wire.Collect(func() (*kvoffloadv1.GetChunk, error) {
		ch, err := st.Recv()
		if err == nil {
			a.received()
		}
		return ch, err
	}, keys, bufs, maxValueBytes)
}
