package client

import (
	"context"
	"fmt"

	"github.com/kvoffload/kvoffload"
	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// Desc names a byte range of a Region for a key: [Offset, Offset+Length), in bytes.
type Desc struct {
	Key            string
	Offset, Length int
}

// NewRegion registers a shared-memory region of size bytes with the client's first member
// on a local socket (a "unix://PATH" address), for OffloadFrom and GetInto: the zero-copy
// path. The node maps the region; it counts against the node's limits (MaxRegionBytes,
// MaxRegionsPerConn, MaxRegions, MaxMappedBytes: ErrTooLarge naming the limit). Errors:
// ErrInvalidArgument when the client has no local member or size is not positive,
// ErrUnavailable when the socket cannot be reached, ErrClosed.
func (c *Client) NewRegion(size int) (*Region, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("%w: NewRegion", kvoffload.ErrClosed)
	}
	for _, m := range c.members {
		if m.local != nil {
			return m.local.staging.reg.register(size)
		}
	}
	return nil, fmt.Errorf("%w: NewRegion: no member has a unix:// address", kvoffload.ErrInvalidArgument)
}

// OffloadFrom stores the ranges descs name in r as one transaction named id, like
// BatchOffload, without copying them on the client: the node reads each range in place and
// a range rewritten during the call is Rejected (CodeInvalidValue) or stored as it was read,
// never under a checksum it does not have. A range outside the region is Rejected (CodeInvalidValue)
// and nothing of it is stored. If the call moves to a member that does not hold r (a
// failover), the ranges are streamed from r. Do not rewrite the ranges until the call
// returns; after ErrIndeterminate, not until a retry with the same id has returned (it may
// store the bytes the ranges hold then). Errors as BatchOffload.
func (c *Client) OffloadFrom(ctx context.Context, id kvoffload.TxnID, r *Region, descs []Desc) ([]kvoffload.KeyResult, error) {
	if err := kvoffload.CheckTxnID(id); err != nil {
		return nil, err
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	pb := make([]*kvoffloadv1.Desc, len(descs))
	objs := make([]kvoffload.Object, len(descs)) // for a member without r: the ranges in place
	for i, d := range descs {
		if d.Offset < 0 || d.Length < 0 || d.Offset > len(r.mem) || d.Length > len(r.mem)-d.Offset {
			return nil, fmt.Errorf("%w: OffloadFrom: descriptor %d (%q) [%d, +%d) is outside the region of %d bytes",
				kvoffload.ErrInvalidArgument, i, d.Key, d.Offset, d.Length, len(r.mem))
		}
		pb[i] = &kvoffloadv1.Desc{Key: d.Key, Offset: uint64(d.Offset), Length: uint64(d.Length)}
		objs[i] = kvoffload.Object{Key: d.Key, Value: r.mem[d.Offset : d.Offset+d.Length]}
	}
	var out []kvoffload.KeyResult
	err := c.retry(ctx, "OffloadFrom", true, func(ctx context.Context, a *attempt) error {
		var res []kvoffload.KeyResult
		var err error
		if a.m.local != nil && a.m.local.staging.reg == r.reg {
			var resp *kvoffloadv1.OffloadResponse
			if err = onRegion(r, func(ref *kvoffloadv1.RegionRef) (err error) {
				resp, err = a.m.local.kv.Offload(ctx, &kvoffloadv1.LocalOffloadRequest{TxnId: id[:], Region: ref, Objects: pb})
				return err
			}); err == nil {
				a.received()
				res, err = keyResults(resp, objs)
			}
		} else {
			res, err = c.offloadOnce(ctx, a, id, objs)
		}
		out = res
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetInto reads the keys descs name into r, each value at its descriptor's Offset, like
// BatchGetInto: GetResult.Value aliases r.Bytes() (valid until the range is reused). A
// value longer than its Length is ShortBuffer with Size; a range outside the region is
// ErrInvalidArgument. A member that does not hold r (a failover) streams into the ranges.
// After an error the node may still be copying the values of reads it had in flight into
// the ranges (until those reads end, within its read deadline): a range must not be read as
// the value of another key until then.
// Errors as BatchGet.
func (c *Client) GetInto(ctx context.Context, r *Region, descs []Desc) ([]kvoffload.GetResult, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	pb := make([]*kvoffloadv1.Desc, len(descs))
	keys := make([]string, len(descs))
	bufs := make([][]byte, len(descs))
	for i, d := range descs {
		if d.Offset < 0 || d.Length < 0 || d.Offset > len(r.mem) || d.Length > len(r.mem)-d.Offset {
			return nil, fmt.Errorf("%w: GetInto: descriptor %d (%q) [%d, +%d) is outside the region of %d bytes",
				kvoffload.ErrInvalidArgument, i, d.Key, d.Offset, d.Length, len(r.mem))
		}
		pb[i] = &kvoffloadv1.Desc{Key: d.Key, Offset: uint64(d.Offset), Length: uint64(d.Length)}
		keys[i], bufs[i] = d.Key, r.mem[d.Offset:d.Offset+d.Length]
	}
	var out []kvoffload.GetResult
	err := c.retry(ctx, "GetInto", false, func(ctx context.Context, a *attempt) error {
		if a.m.local == nil || a.m.local.staging.reg != r.reg {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			res, err := getStream(ctx, a, keys, bufs)
			out = res
			return err
		}
		var resp *kvoffloadv1.LocalGetResponse
		err := onRegion(r, func(ref *kvoffloadv1.RegionRef) (err error) {
			resp, err = a.m.local.kv.Get(ctx, &kvoffloadv1.LocalGetRequest{Region: ref, Keys: pb})
			return err
		})
		if err != nil {
			return err
		}
		a.received()
		if len(resp.GetResults()) != len(pb) {
			return fmt.Errorf("%w: %d results for %d keys", kvoffload.ErrProtocol, len(resp.GetResults()), len(pb))
		}
		res := make([]kvoffload.GetResult, len(pb))
		for i, g := range resp.GetResults() {
			res[i], _ = fromLocal(g, pb[i].Key)
			if res[i].Status == kvoffload.Found {
				if res[i].Size > descs[i].Length {
					return fmt.Errorf("%w: key %q: a value of %d bytes for a descriptor of %d", kvoffload.ErrProtocol, pb[i].Key, res[i].Size, descs[i].Length)
				}
				res[i].Value = bufs[i][:res[i].Size]
			}
		}
		out = res
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
