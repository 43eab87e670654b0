package forward

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// fakeLeader is a leader's read index: the highest acknowledged write when the request
// reaches it, answered after a delay (a forwarded round trip).
type fakeLeader struct {
	acked   atomic.Uint64 // the index of the latest acknowledged write
	calls   atomic.Int64  // requests received
	delay   time.Duration
	err     error         // every request's answer when set
	started chan struct{} // when set, receives once per request as it starts
	release chan struct{} // when set, every request waits for it (or its ctx) before answering
}

func (f *fakeLeader) fetch(ctx context.Context) (uint64, error) {
	f.calls.Add(1)
	index := f.acked.Load()
	if f.started != nil {
		f.started <- struct{}{}
	}
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	time.Sleep(f.delay)
	return index, f.err
}

// Concurrent callers share requests, and each gets an index at or above every write
// acknowledged before it called: a request that started before a caller arrived never
// serves it.
func TestSharedReadIndexLinearizable(t *testing.T) {
	f := &fakeLeader{delay: 2 * time.Millisecond}
	s := &sharedIndex{fetch: f.fetch}
	const callers, each = 8, 50
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				w := f.acked.Add(1) // a write acknowledged before the call
				index, err := s.get(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if index < w {
					t.Errorf("read index %d misses write %d, acknowledged before the call", index, w)
					return
				}
			}
		}()
	}
	wg.Wait()
	calls := f.calls.Load()
	t.Logf("%d read indexes from %d requests", callers*each, calls)
	if calls > callers*each*3/4 {
		t.Errorf("%d requests for %d concurrent read indexes: not shared", calls, callers*each)
	}
}

// Callers that arrive while a request is in flight share exactly one next request, which
// starts once the current one returns.
func TestSharedReadIndexOneNextRequest(t *testing.T) {
	f := &fakeLeader{started: make(chan struct{}, 16), release: make(chan struct{})}
	s := &sharedIndex{fetch: f.fetch}
	first := make(chan uint64, 1)
	f.acked.Store(1)
	go func() { i, _ := s.get(context.Background()); first <- i }()
	<-f.started // the first request is in flight, holding index 1
	f.acked.Store(2)
	const callers = 8
	got := make(chan uint64, callers)
	for range callers {
		go func() {
			i, err := s.get(context.Background())
			if err != nil {
				t.Error(err)
			}
			got <- i
		}()
	}
	testkit.Eventually(t, 5*time.Second, "the callers to wait on the next request", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.next != nil && s.next.waiters == callers })
	close(f.release)
	if i := <-first; i != 1 {
		t.Errorf("first caller: index %d, want 1", i)
	}
	for range callers {
		if i := <-got; i != 2 {
			t.Errorf("caller arrived during the first request: index %d, want 2 (a request started after it)", i)
		}
	}
	if n := f.calls.Load(); n != 2 {
		t.Errorf("%d requests, want 2: one in flight, one shared by the %d callers that arrived meanwhile", n, callers)
	}
}

// A failed request fails every caller that shared it, with its error; the next caller gets
// a request of its own.
func TestSharedReadIndexError(t *testing.T) {
	boom := errors.New("leader unreachable")
	f := &fakeLeader{err: boom, started: make(chan struct{}, 16), release: make(chan struct{})}
	s := &sharedIndex{fetch: f.fetch}
	const callers = 4
	errs := make(chan error, callers)
	for range callers {
		go func() { _, err := s.get(context.Background()); errs <- err }()
	}
	<-f.started
	testkit.Eventually(t, 5*time.Second, "every caller to wait on a request", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := s.cur.waiters
		if s.next != nil {
			n += s.next.waiters
		}
		return n == callers
	})
	close(f.release)
	for range callers {
		if err := <-errs; !errors.Is(err, boom) {
			t.Errorf("caller: %v, want %v", err, boom)
		}
	}
	f.err = nil
	if _, err := s.get(context.Background()); err != nil {
		t.Errorf("after the failure: %v", err)
	}
}

// A caller whose context ends stops waiting with its context's error; the request goes on
// for the callers still waiting, and is cancelled once none is.
func TestSharedReadIndexCallerContext(t *testing.T) {
	started := make(chan context.Context, 4) // each request's context, as it starts
	release := make(chan struct{})           // each send answers one request with index 7
	s := &sharedIndex{fetch: func(ctx context.Context) (uint64, error) {
		started <- ctx
		select {
		case <-release:
			return 7, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}}
	get := func(ctx context.Context) chan error {
		errc := make(chan error, 1)
		go func() {
			i, err := s.get(ctx)
			if err == nil && i != 7 {
				err = fmt.Errorf("index %d, want 7", i)
			}
			errc <- err
		}()
		return errc
	}

	// The only caller leaves: its request is cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	alone := get(ctx)
	rctx := <-started
	cancel()
	if err := <-alone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v, want context.Canceled", err)
	}
	select {
	case <-rctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the request of a caller that left is not cancelled")
	}
	testkit.Eventually(t, 5*time.Second, "the abandoned request to end", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.cur == nil })

	// Two callers share the next request; one leaves, the other gets the answer.
	first := get(context.Background())
	<-started
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	leaver, stayer := get(ctx), get(context.Background())
	testkit.Eventually(t, 5*time.Second, "both callers to wait on the next request", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.next != nil && s.next.waiters == 2 })
	release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatalf("first caller: %v", err)
	}
	rctx = <-started
	cancel()
	if err := <-leaver; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v, want context.Canceled", err)
	}
	if rctx.Err() != nil {
		t.Fatal("the shared request was cancelled with a caller still waiting")
	}
	release <- struct{}{}
	if err := <-stayer; err != nil {
		t.Errorf("caller still waiting: %v", err)
	}
}
