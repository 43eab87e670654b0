package replay

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// memTarget stores everything; its BatchGet calls onGet first (to simulate a SIGINT that
// arrives during the read-back) and honours ctx like a real client does.
type memTarget struct {
	mu    sync.Mutex
	m     map[string][]byte
	onGet func()
}

func (t *memTarget) BatchOffload(ctx context.Context, id fsm.TxnID, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]kvoffload.KeyResult, len(objs))
	for i, o := range objs {
		t.m[o.Key] = o.Value
		out[i] = kvoffload.KeyResult{Key: o.Key, Outcome: kvoffload.Stored}
	}
	return out, nil
}

func (t *memTarget) BatchGet(ctx context.Context, keys []string) ([]kvoffload.GetResult, error) {
	t.onGet()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]kvoffload.GetResult, len(keys))
	for i, k := range keys {
		if v, ok := t.m[k]; ok {
			out[i] = kvoffload.GetResult{Key: k, Status: kvoffload.Found, Value: v}
		} else {
			out[i] = kvoffload.GetResult{Key: k, Status: kvoffload.NotFound}
		}
	}
	return out, nil
}

// TestInterruptedDuringReadBack: a SIGINT during the read-back must not leave Verified true with
// every unread key counted Missing, although nothing is missing.
func TestInterruptedDuringReadBack(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tg := &memTarget{m: map[string][]byte{}, onGet: cancel}
	reqs := []trace.Request{{HashIDs: []int64{1, 2, 3}}, {HashIDs: []int64{4, 5}}}
	s, err := Run(ctx, tg, reqs, Options{Writers: 1, BlockSize: 16, Model: "m", ReadBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ctx.Err=%v verified=%v missing=%d first=%q", ctx.Err(), s.Verified, s.Missing, s.FirstProblem)
	if s.Verified && s.Missing > 0 {
		t.Errorf("interrupted read-back reported as verified with %d missing keys", s.Missing)
	}
}

// TestVerifiedReadBack: an uninterrupted replay verifies every key.
func TestVerifiedReadBack(t *testing.T) {
	tg := &memTarget{m: map[string][]byte{}, onGet: func() {}}
	reqs := []trace.Request{{HashIDs: []int64{1, 2, 3}}, {HashIDs: []int64{1, 2, 4}}}
	s, err := Run(context.Background(), tg, reqs, Options{Writers: 2, BlockSize: 16, Model: "m", ReadBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Verified || s.Missing != 0 || s.Corrupt != 0 || s.UniqueKeys != 4 || s.Keys != 6 {
		t.Fatalf("summary %+v, want verified, 4 unique of 6 keys, none missing or corrupt", s)
	}
}

// TestReadBackCountsEveryProblem: with several readers, a lost key counts Missing and a damaged
// one Corrupt, once each, and the first problem is named.
func TestReadBackCountsEveryProblem(t *testing.T) {
	tg := &memTarget{m: map[string][]byte{}}
	damaged := false
	tg.onGet = func() {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		if damaged {
			return
		}
		damaged = true
		i := 0
		for k, v := range tg.m {
			switch i {
			case 0:
				delete(tg.m, k)
			case 1:
				v = append([]byte(nil), v...)
				v[3] ^= 1
				tg.m[k] = v
			}
			i++
		}
	}
	var reqs []trace.Request
	for r := range 10 {
		reqs = append(reqs, trace.Request{HashIDs: []int64{int64(3 * r), int64(3*r + 1), int64(3*r + 2)}})
	}
	s, err := Run(context.Background(), tg, reqs, Options{Writers: 4, BlockSize: 64, Model: "m", ReadBatch: 2, Readers: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Verified || s.UniqueKeys != 30 || s.Missing != 1 || s.Corrupt != 1 || s.Unavailable != 0 || s.FirstProblem == "" {
		t.Fatalf("summary %+v, want verified, 30 keys, 1 missing, 1 corrupt, a first problem", s)
	}
}

// downTarget fails every BatchOffload after the first ok ones with err.
type downTarget struct {
	memTarget
	ok   atomic.Int64
	err  error
	sent atomic.Int64
}

func (t *downTarget) BatchOffload(ctx context.Context, id fsm.TxnID, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	if t.sent.Add(1) > t.ok.Load() {
		return nil, t.err
	}
	return t.memTarget.BatchOffload(ctx, id, objs)
}

// TestStopsWhenTheStoreTakesNoBatch: a batch that fails Unavailable or Indeterminate (a
// cluster without a leader) stops the writes: the writers in flight finish, no new batch is
// sent, and the summary says Stopped, not verified (a new user waited 480 s for 100 requests,
// each batch waiting out the time-out). Another batch error (here a refusal) does not stop it.
func TestStopsWhenTheStoreTakesNoBatch(t *testing.T) {
	var reqs []trace.Request
	for r := range 100 {
		reqs = append(reqs, trace.Request{HashIDs: []int64{int64(r)}})
	}
	for _, sentinel := range []error{kvoffload.ErrUnavailable, kvoffload.ErrIndeterminate} {
		tg := &downTarget{memTarget: memTarget{m: map[string][]byte{}, onGet: func() {}}, err: fmt.Errorf("%w: no leader", sentinel)}
		tg.ok.Store(10)
		s, err := Run(context.Background(), tg, reqs, Options{Writers: 4, BlockSize: 16, Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		// The 10 that succeed, and a few per writer: those in flight when the first failed, and
		// any a writer began before that failure was recorded (of 100).
		if !s.Stopped || s.Verified || s.Requests > 10+2*4 || !strings.Contains(s.FirstProblem, "no leader") {
			t.Fatalf("%v: summary %+v; want stopped, not verified, at most %d requests, the error named", sentinel, s, 10+2*4)
		}
	}
	tg := &downTarget{memTarget: memTarget{m: map[string][]byte{}, onGet: func() {}}, err: fmt.Errorf("%w: too big", kvoffload.ErrTooLarge)}
	tg.ok.Store(10)
	s, err := Run(context.Background(), tg, reqs, Options{Writers: 4, BlockSize: 16, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Stopped || s.Requests != 100 || s.BatchErrors != 90 {
		t.Fatalf("refused batches: summary %+v; want every request sent and 90 batch errors", s)
	}
}

// prepare keeps at most cap(ready) batches ahead, in trace order, each value the payload its
// key derives; primed closes once ready is full (or at the end of a short trace), and quit
// stops it, generating nothing more, and closes ready.
func TestPrepareAhead(t *testing.T) {
	var reqs []trace.Request
	for i := range 10 {
		reqs = append(reqs, trace.Request{HashIDs: []int64{int64(i)}})
	}
	w := newWriter(nil, Options{Writers: 3, BlockSize: 16, Model: "m", Seed: 7}, reqs)
	ready, primed, quit := make(chan batch, 3), make(chan struct{}), make(chan struct{})
	stopped := make(chan struct{})
	go func() { w.prepare(context.Background(), ready, primed, quit); close(stopped) }()
	<-primed
	if len(ready) != 3 {
		t.Fatalf("primed with %d batches ready, want 3", len(ready))
	}
	for i := range 5 {
		b, _ := w.take(ready)
		want := trace.Keys("m", reqs[i])[0]
		if b.req != i || len(b.objs) != 1 || b.objs[0].Key != want || string(b.objs[0].Value) != string(trace.Payload(7, want, 16)) {
			t.Fatalf("batch %d: %+v, want request %d's key %s with its payload", i, b, i, want)
		}
	}
	close(quit)
	<-stopped
	n := 0
	for range ready {
		n++
	}
	if n > 3 {
		t.Fatalf("%d batches left after quit, want at most 3", n)
	}

	short := newWriter(nil, Options{Writers: 32, BlockSize: 16, Model: "m"}, reqs[:2])
	ready, primed = make(chan batch, 32), make(chan struct{})
	short.prepare(context.Background(), ready, primed, make(chan struct{}))
	<-primed // closed although ready never filled
	if len(ready) != 2 {
		t.Fatalf("a 2-request trace left %d batches, want 2", len(ready))
	}
}

// prepare keeps at most aheadMax bytes of payload ready (and at least one batch), and stops
// when its context ends.
func TestPrepareAheadBytes(t *testing.T) {
	var reqs []trace.Request
	for i := range 10 {
		reqs = append(reqs, trace.Request{HashIDs: []int64{int64(i)}})
	}
	w := newWriter(nil, Options{Writers: 32, BlockSize: 16, Model: "m"}, reqs)
	w.aheadMax = 40 // two 16-byte batches
	ctx, cancel := context.WithCancel(context.Background())
	ready, primed, stopped := make(chan batch, 32), make(chan struct{}), make(chan struct{})
	go func() { w.prepare(ctx, ready, primed, make(chan struct{})); close(stopped) }()
	<-primed
	if len(ready) != 2 || w.ahead.Load() != 32 {
		t.Fatalf("primed with %d batches and %d bytes ready, want 2 and 32", len(ready), w.ahead.Load())
	}
	w.take(ready)
	for len(ready) < 2 { // the room made is filled again
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-stopped
	if len(ready) > 2 {
		t.Fatalf("%d batches ready after the context ended, want at most 2", len(ready))
	}

	big := newWriter(nil, Options{Writers: 32, BlockSize: 64, Model: "m"}, reqs[:3])
	big.aheadMax = 40 // less than one batch: one at a time
	ready, primed = make(chan batch, 32), make(chan struct{})
	go big.prepare(context.Background(), ready, primed, make(chan struct{}))
	<-primed
	if len(ready) != 1 {
		t.Fatalf("batches over aheadMax: %d ready, want 1", len(ready))
	}
}

// Under the bytes bound, prepare readies every batch of the trace before the clock starts,
// not only one per writer: no payload is generated while the store is timed.
func TestPrepareReadiesTheWholeTraceWithinAhead(t *testing.T) {
	var reqs []trace.Request
	for i := range 100 {
		reqs = append(reqs, trace.Request{HashIDs: []int64{int64(2 * i), int64(2*i + 1)}})
	}
	opt := Options{Writers: 4, BlockSize: 16, Model: "m", Ahead: 100 * 2 * 16}
	w := newWriter(nil, opt, reqs)
	ready, primed := newReady(opt.Writers, len(reqs)), make(chan struct{})
	go w.prepare(context.Background(), ready, primed, make(chan struct{}))
	<-primed
	if len(ready) != len(reqs) || w.ahead.Load() != opt.Ahead {
		t.Fatalf("primed with %d batches and %d bytes ready, want %d and %d", len(ready), w.ahead.Load(), len(reqs), opt.Ahead)
	}
}

// A replay the store stops counts the unique keys of the requests it sent, not the trace's.
func TestStoppedReplayCountsSentKeys(t *testing.T) {
	tg := &stoppingTarget{memTarget: memTarget{m: map[string][]byte{}, onGet: func() {}}, okBatches: 1}
	reqs := []trace.Request{{HashIDs: []int64{1, 2}}, {HashIDs: []int64{3, 4}}, {HashIDs: []int64{5, 6}}}
	s, err := Run(context.Background(), tg, reqs, Options{Writers: 1, BlockSize: 16, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Stopped || s.Requests != 2 || s.Keys != 4 || s.UniqueKeys != 4 || s.Stored != 2 {
		t.Fatalf("stopped replay: %+v, want stopped after 2 requests, 4 keys (4 unique), 2 stored", s)
	}
}

// stoppingTarget takes okBatches batches, then answers ErrUnavailable.
type stoppingTarget struct {
	memTarget
	okBatches int
	calls     atomic.Int64
}

func (t *stoppingTarget) BatchOffload(ctx context.Context, id fsm.TxnID, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	if t.calls.Add(1) > int64(t.okBatches) {
		return nil, fmt.Errorf("%w: store gone (test)", kvoffload.ErrUnavailable)
	}
	return t.memTarget.BatchOffload(ctx, id, objs)
}

// A progress line says so when no batch has finished for stallAfter, and not otherwise.
func TestProgressNamesAStall(t *testing.T) {
	w := newWriter(nil, Options{}, nil)
	start := time.Now().Add(-2 * stallAfter)
	if s := w.stall(start, false); !strings.Contains(s, "no batch has finished for 10s") {
		t.Fatalf("no batch since a start 10s ago: %q", s)
	}
	if s := w.stall(start, true); s != "" {
		t.Fatalf("the last line: %q, want nothing", s)
	}
	w.lastDone.Store(time.Now().UnixNano())
	if s := w.stall(start, false); s != "" {
		t.Fatalf("a batch just finished: %q, want nothing", s)
	}
}
