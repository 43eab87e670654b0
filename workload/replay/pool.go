package replay

import (
	"cmp"
	"context"
	"fmt"

	"github.com/kvoffload/kvoffload/workload/trace"
)

// Pool is memory a replay's payloads live in (Options.Pool): slots of one block each, as an
// engine's host KV pool is pages of one size. A writer's batch holds its slots until the
// batch offload returns, and a reader holds one slot per key of its batch; with a pool in a
// client's shared-memory Region (client.NewRegion), the values travel as descriptors of it,
// which is how a co-located engine that registers its pool moves pages.
type Pool struct {
	mem  []byte
	slot int
	free chan int // indexes of the slots not in use
}

// NewPool divides mem into slots of slot bytes. It fails when mem holds no slot.
func NewPool(mem []byte, slot int) (*Pool, error) {
	if slot < 1 || len(mem)/slot < 1 {
		return nil, fmt.Errorf("replay: a pool of %d bytes holds no slot of %d bytes", len(mem), slot)
	}
	n := len(mem) / slot
	p := &Pool{mem: mem, slot: slot, free: make(chan int, n)}
	for i := range n {
		p.free <- i
	}
	return p, nil
}

// get takes a free slot, waiting for one until ctx ends or quit is closed.
func (p *Pool) get(ctx context.Context, quit <-chan struct{}) (int, []byte, bool) {
	select {
	case i := <-p.free:
		return i, p.mem[i*p.slot : (i+1)*p.slot : (i+1)*p.slot], true
	case <-ctx.Done():
	case <-quit:
	}
	return 0, nil, false
}

// put gives slots back.
func (p *Pool) put(slots []int) {
	for _, i := range slots {
		p.free <- i
	}
}

// putAll is put on a pool that may be nil (then slots is empty).
func (p *Pool) putAll(slots []int) {
	if p != nil {
		p.put(slots)
	}
}

// PoolBytes is the size of a pool that keeps the replay of reqs with opt from waiting on
// slots: the payloads prepare keeps ahead (Options.Ahead), every writer's batch in flight, or
// every key of the trace if fewer; and at least the read-back's batches in flight.
func PoolBytes(reqs []trace.Request, opt Options) int64 {
	keys, largest := 0, 0
	for _, r := range reqs {
		keys += len(r.HashIDs)
		largest = max(largest, len(r.HashIDs))
	}
	ahead := opt.Ahead
	if ahead <= 0 {
		ahead = DefaultAhead
	}
	slots := min(keys, int(ahead/int64(max(opt.BlockSize, 1)))+max(opt.Writers, 1)*largest)
	slots = max(slots, cmp.Or(max(opt.Readers, 0), 4)*cmp.Or(max(opt.ReadBatch, 0), 64), largest, 1)
	return int64(slots) * int64(opt.BlockSize)
}

// checkPool refuses a Pool the replay of reqs with opt could not run on: slots of another
// size than a block, fewer slots than the largest request has keys (prepare would wait for
// ever) or than a read-back batch, or a target without BatchGetInto.
func checkPool(t Target, reqs []trace.Request, opt Options) error {
	p := opt.Pool
	if p == nil {
		return nil
	}
	if _, ok := t.(IntoTarget); !ok {
		return fmt.Errorf("replay: a Pool needs a target with BatchGetInto, not %T", t)
	}
	if p.slot != opt.BlockSize {
		return fmt.Errorf("replay: the Pool's slots are %d bytes, the blocks %d", p.slot, opt.BlockSize)
	}
	largest := opt.ReadBatch
	for _, r := range reqs {
		largest = max(largest, len(r.HashIDs))
	}
	if cap(p.free) < largest {
		return fmt.Errorf("replay: the Pool has %d slots, fewer than the %d a batch takes", cap(p.free), largest)
	}
	return nil
}
