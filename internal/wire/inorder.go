package wire

import (
	"fmt"
	"sync"

	"github.com/kvoffload/kvoffload"
)

// InOrder hands results visited in any order, from several goroutines (the node's
// batchGetEach), to one goroutine that takes them in position order, as SendGet sends them.
type InOrder struct {
	mu    sync.Mutex
	cond  sync.Cond
	res   []kvoffload.GetResult
	have  []bool
	ended bool
	err   error
	done  chan struct{}
}

// NewInOrder returns the hand-over of n results.
func NewInOrder(n int) *InOrder {
	q := &InOrder{res: make([]kvoffload.GetResult, n), have: make([]bool, n), done: make(chan struct{})}
	q.cond.L = &q.mu
	return q
}

// Put is the visitor: it keeps the value (the taker owns it).
func (q *InOrder) Put(i int, r kvoffload.GetResult) (keep bool) {
	q.mu.Lock()
	q.res[i], q.have[i] = r, true
	q.mu.Unlock()
	q.cond.Broadcast()
	return true
}

// End records that the visits are over, with the read's error (then nothing was visited).
func (q *InOrder) End(err error) {
	q.mu.Lock()
	q.ended, q.err = true, err
	q.mu.Unlock()
	q.cond.Broadcast()
	close(q.done)
}

// Next waits for the result at position i and hands it over, or returns the read's error. The
// visits having ended without i is a bug of the visitor's caller, reported as an error.
func (q *InOrder) Next(i int) (kvoffload.GetResult, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.have[i] && !q.ended {
		q.cond.Wait()
	}
	switch {
	case q.have[i]:
		r := q.res[i]
		q.res[i] = kvoffload.GetResult{}
		return r, nil
	case q.err != nil:
		return kvoffload.GetResult{}, q.err
	default:
		return kvoffload.GetResult{}, fmt.Errorf("%w: node: no result for position %d of %d", kvoffload.ErrProtocol, i, len(q.res))
	}
}

// Wait returns once the visits are over.
func (q *InOrder) Wait() { <-q.done }
