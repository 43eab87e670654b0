package bench

import (
	"errors"
	"fmt"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/workload/replay"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// RegionPool returns a replay.Pool in a shared-memory Region of c (client.NewRegion), sized
// for the replay of reqs with opt (replay.PoolBytes), and the func that unregisters it: a
// co-located engine's host KV pool, whose pages the client sends as descriptors, with no
// copy. It returns a nil Pool, and no error, when c has no local (unix://) member.
func RegionPool(c *client.Client, reqs []trace.Request, opt replay.Options) (*replay.Pool, func(), error) {
	size := replay.PoolBytes(reqs, opt)
	r, err := c.NewRegion(int(size))
	if errors.Is(err, kvoffload.ErrInvalidArgument) {
		return nil, func() {}, nil // no local member: the stream path has no regions
	}
	if err != nil {
		return nil, nil, fmt.Errorf("bench: a region of %d bytes for the replay's payloads: %w", size, err)
	}
	p, err := replay.NewPool(r.Bytes(), opt.BlockSize)
	if err != nil {
		_ = r.Close()
		return nil, nil, err
	}
	return p, func() { _ = r.Close() }, nil
}
