package client

import (
	"context"
	"fmt"
	"io"

	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// BatchGet reads keys and returns one result per key, in request order. A value whose byte
// count differs from the size the member announced is reported Unavailable, never returned
// truncated. Calls that fail with Unavailable (or another unknown-outcome error, or a stream
// that ends before every key was answered) are retried on the next member until ctx ends. A
// key that is not valid UTF-8 is InvalidKey at once and not sent; the other keys are read.
func (c *Client) BatchGet(ctx context.Context, keys []string) ([]GetResult, error) {
	return sendOnly(keys, self,
		func(k string) GetResult { return GetResult{Key: k, Status: InvalidKey, Reason: invalidKeyReason} },
		func(keys []string) ([]GetResult, error) { return c.batchGet(ctx, keys) })
}

// batchGet runs BatchGet for keys that can all be sent.
func (c *Client) batchGet(ctx context.Context, keys []string) ([]GetResult, error) {
	var out []GetResult
	err := c.retry(ctx, "BatchGet", false, func(ctx context.Context, a *attempt) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := a.m.kv.BatchGet(ctx, &kvoffloadv1.GetRequest{Keys: keys})
		if err != nil {
			return err
		}
		res, err := collect(func() (*kvoffloadv1.GetChunk, error) {
			ch, err := st.Recv()
			if err == nil {
				a.received()
			}
			return ch, err
		}, keys)
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

// maxPrealloc bounds the buffer allocated up front for an announced value size (values are at
// most 64 MiB; a larger announcement grows the buffer as bytes arrive).
const maxPrealloc = 64 << 20

// collect reassembles a GetChunk stream (BatchGet or ReadLocal) for keys. The first chunk of
// each key carries its index and status (and size when Found); data chunks follow. It returns
// errStreamEnded if the stream ends before every key was answered, ErrProtocol if chunks
// arrive out of order, and recv's error otherwise.
func collect(recv func() (*kvoffloadv1.GetChunk, error), keys []string) ([]GetResult, error) {
	a := assembler{res: make([]GetResult, len(keys)), seen: make([]bool, len(keys)), cur: -1}
	for i, k := range keys {
		a.res[i].Key = k
	}
	for {
		ch, err := recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := a.add(ch); err != nil {
			return nil, err
		}
	}
	a.finish()
	for i, ok := range a.seen {
		if !ok {
			return nil, fmt.Errorf("%w: no result for key %d (%q) of %d", errStreamEnded, i, keys[i], len(keys))
		}
	}
	return a.res, nil
}

// assembler holds the reassembly state of one GetChunk stream.
type assembler struct {
	res  []GetResult
	seen []bool
	cur  int    // index of the key receiving data; -1 before the first
	buf  []byte // the current Found key's bytes so far
	want uint64 // the current Found key's announced size
	bad  string // why the current key is no longer Found ("" while it is)
}

func (a *assembler) add(ch *kvoffloadv1.GetChunk) error {
	if ch.GetStatus() == kvoffloadv1.GetStatus_GET_STATUS_UNSPECIFIED {
		return a.data(ch)
	}
	a.finish()
	i := int(ch.GetIndex())
	if i >= len(a.res) || a.seen[i] {
		return fmt.Errorf("%w: chunk for key index %d (%d keys, seen before: %v)", ErrProtocol, i, len(a.res), i < len(a.res))
	}
	a.seen[i], a.cur = true, i
	r := &a.res[i]
	r.Status, r.Reason = getStatus(ch.GetStatus()), ch.GetReason()
	if r.Status == 0 {
		r.Status, r.Reason = Unavailable, fmt.Sprintf("unknown status %d from the member: %s", ch.GetStatus(), ch.GetReason())
	}
	if r.Status == Found {
		a.want = ch.GetSize()
		a.buf = make([]byte, 0, min(a.want, maxPrealloc))
		return a.data(ch)
	}
	if len(ch.GetData()) > 0 {
		return fmt.Errorf("%w: data for key %d whose status is %s", ErrProtocol, i, r.Status)
	}
	return nil
}

// data appends a chunk's bytes to the current key.
func (a *assembler) data(ch *kvoffloadv1.GetChunk) error {
	// Data chunks belong to the current key; their index may be left unset (0).
	if a.cur < 0 || (ch.GetIndex() != 0 && int(ch.GetIndex()) != a.cur) {
		return fmt.Errorf("%w: data chunk for key index %d while reading %d", ErrProtocol, ch.GetIndex(), a.cur)
	}
	if a.res[a.cur].Status != Found {
		if len(ch.GetData()) > 0 && a.bad == "" {
			return fmt.Errorf("%w: data for key %d whose status is %s", ErrProtocol, a.cur, a.res[a.cur].Status)
		}
		return nil // the rest of a value already reported Unavailable
	}
	if uint64(len(a.buf))+uint64(len(ch.GetData())) > a.want {
		a.fail(fmt.Sprintf("value longer than the announced %d bytes", a.want))
		return nil
	}
	a.buf = append(a.buf, ch.GetData()...)
	return nil
}

// finish closes the current key: a Found value must hold exactly the announced bytes.
func (a *assembler) finish() {
	if a.cur < 0 {
		return
	}
	if r := &a.res[a.cur]; r.Status == Found {
		if uint64(len(a.buf)) == a.want {
			r.Value = a.buf
		} else {
			a.fail(fmt.Sprintf("value truncated: got %d of %d bytes", len(a.buf), a.want))
		}
	}
	a.cur, a.buf, a.want, a.bad = -1, nil, 0, ""
}

// fail reports the current key Unavailable because its bytes did not add up.
func (a *assembler) fail(why string) {
	r := &a.res[a.cur]
	r.Status, r.Value, r.Reason = Unavailable, nil, why
	a.buf, a.bad = nil, why
}

func getStatus(s kvoffloadv1.GetStatus) GetStatus {
	switch s {
	case kvoffloadv1.GetStatus_GET_STATUS_FOUND:
		return Found
	case kvoffloadv1.GetStatus_GET_STATUS_NOT_FOUND:
		return NotFound
	case kvoffloadv1.GetStatus_GET_STATUS_CORRUPT:
		return Corrupt
	case kvoffloadv1.GetStatus_GET_STATUS_UNAVAILABLE:
		return Unavailable
	}
	return 0
}
