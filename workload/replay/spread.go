package replay

import (
	"context"
	"sync/atomic"

	"github.com/kvoffload/kvoffload"
)

// Spread sends each call to the next of its Targets in turn.
type Spread struct {
	Targets []Target
	next    atomic.Uint64
}

var _ Target = (*Spread)(nil)

func (s *Spread) pick() Target { return s.Targets[(s.next.Add(1)-1)%uint64(len(s.Targets))] }

// BatchOffload implements Target.
func (s *Spread) BatchOffload(ctx context.Context, id kvoffload.TxnID, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	return s.pick().BatchOffload(ctx, id, objs)
}

// BatchGet implements Target.
func (s *Spread) BatchGet(ctx context.Context, keys []string) ([]kvoffload.GetResult, error) {
	return s.pick().BatchGet(ctx, keys)
}
