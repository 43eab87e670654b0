package forward

import (
	"context"
	"fmt"
	"sync"
)

// sharedIndex shares read index requests among concurrent callers, the batching of ReadIndex
// that etcd does: a caller is served by the first request that starts after it arrived, and
// every caller waiting when a request starts shares its answer. At most one request is in
// flight; callers that arrive meanwhile wait for the next one, which starts when the current
// one returns. A caller never gets the answer of a request that started before it called:
// linearizability needs an index taken after the read began.
//
// A request runs under its own context, which ends once no caller waits for it any more:
// a caller whose context ends stops waiting, and the request goes on for the others.
type sharedIndex struct {
	fetch func(context.Context) (uint64, error) // one request: the index, or why not

	mu   sync.Mutex
	cur  *indexRound // in flight; nil when none is
	next *indexRound // waiting for cur to return; nil when no caller waits for it
}

// indexRound is one request and the callers that share it.
type indexRound struct {
	done    chan struct{} // closed once index and err are set
	index   uint64
	err     error
	waiters int                // callers still waiting; guarded by sharedIndex.mu
	ctx     context.Context    // the request's; set when it starts
	cancel  context.CancelFunc // ends ctx: called when the request returns or no one waits
}

// get returns the index of a request that started after the call, or that request's error,
// or, once ctx ends first, an error wrapping ctx's.
func (s *sharedIndex) get(ctx context.Context) (uint64, error) {
	s.mu.Lock()
	r := s.next
	switch {
	case s.cur == nil:
		r = &indexRound{done: make(chan struct{})}
		s.start(r)
	case r == nil:
		r = &indexRound{done: make(chan struct{})}
		s.next = r
	}
	r.waiters++
	s.mu.Unlock()
	select {
	case <-r.done:
		return r.index, r.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-r.done: // answered meanwhile: the answer stands
		return r.index, r.err
	default:
	}
	if r.waiters--; r.waiters == 0 {
		if r == s.next {
			s.next = nil // not started: no request for no one
		} else {
			r.cancel()
		}
	}
	return 0, fmt.Errorf("node: waiting for a read index: %w", ctx.Err())
}

// start makes r the request in flight and runs it; s.mu is held.
func (s *sharedIndex) start(r *indexRound) {
	r.ctx, r.cancel = context.WithCancel(context.Background())
	s.cur = r
	go s.run(r)
}

// run runs the request of r, answers its callers, then starts the next round if a caller
// waits for one.
func (s *sharedIndex) run(r *indexRound) {
	index, err := s.fetch(r.ctx)
	r.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	r.index, r.err = index, err
	close(r.done)
	s.cur = nil
	if n := s.next; n != nil {
		s.next = nil
		s.start(n)
	}
}
