// Package watch serves a node's event stream, WatchEvents (docs/design.md "The event
// stream"): a retained window of the key changes the FSM applies, and the streams that read
// it, each resuming from a position or, when its position is gone, from a listing of every
// live key. Package node wires it: the ring watches the FSM from before Raft restores or
// replays it, and the node answers what a stream needs of it (Node).
package watch

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/transport"
)

// Rules:
//   - A position (index, ordinal) names the ordinal-th key change of the command applied at
//     Raft index index (fsm.Change); ordinal 0 names the point before the index's first
//     change. Positions are the same on every member: they derive from the replicated log.
//   - The ring holds every event after ring.base, up to the changes of ring.head, in
//     position order. It is filled by the FSM's change hook on Raft's apply goroutine; a
//     Restore empties it and moves base to the restored index (the commands folded into the
//     snapshot were never seen here), and a full ring drops its oldest event into base.
//   - A consumer at a position at or after base reads from the ring; one before base gets a
//     RESET, then every live key LISTED at one position L = (A+1, 0), read with the FSM's
//     applied index A under one hold of its lock, then the ring's events after L. So a
//     consumer never misses a change silently: a gap is always a RESET.
//   - A consumer's memory is one batch of events (watchBatch); a listing's is every live key,
//     and at most maxListings listings run at once per node.

const (
	// watchBatch is the most events in one WatchResponse: with keys of at most
	// wire.MaxKeyBytes and node IDs of at most wire.MaxNodeIDBytes, under 400 KiB.
	watchBatch = 256
	// maxListings is the listings (copies of every live key) a node builds at once; more
	// consumers that need one wait.
	maxListings = 2
)

// CatchUp is how long a stream whose from is beyond this member's Raft log waits for the
// log to reach it before it is refused OUT_OF_RANGE (a lagging follower); tests shorten it.
var CatchUp = 5 * time.Second

// pos is a position in the event stream.
type pos struct {
	index   uint64
	ordinal uint32
}

func (p pos) less(q pos) bool {
	return p.index < q.index || (p.index == q.index && p.ordinal < q.ordinal)
}

func (p pos) String() string { return fmt.Sprintf("%d.%d", p.index, p.ordinal) }

// event is one retained change.
type event struct {
	pos
	kind  fsm.ChangeKind
	cause fsm.Cause
	size  uint32
	gen   uint64
	key   string
	owner string
}

// eventRing is the node's retained window of events: an fsm.ChangeHook.
type eventRing struct {
	mu    sync.Mutex
	buf   []event // circular: n events from start
	start int
	n     int
	base  pos    // every event after base is held
	head  uint64 // highest index reported (Applied or Restored)
	wake  chan struct{}
	// dropped counts events dropped from a full ring (kvoffload_watch_dropped_events_total).
	dropped atomic.Uint64
}

func newEventRing(capacity int) *eventRing {
	return &eventRing{buf: make([]event, capacity), wake: make(chan struct{})}
}

// notify wakes the readers waiting on the ring; r.mu is held.
func (r *eventRing) notify() {
	close(r.wake)
	r.wake = make(chan struct{})
}

// Applied appends the changes of the command at index (fsm.ChangeHook).
func (r *eventRing) Applied(index uint64, changes []fsm.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range changes {
		if r.n == len(r.buf) {
			r.base = r.buf[r.start].pos
			r.buf[r.start] = event{}
			r.start = (r.start + 1) % len(r.buf)
			r.n--
			r.dropped.Add(1)
		}
		// The key and owner are cloned: the change's strings may share the memory of the
		// decoded command, which the ring must not keep alive.
		r.buf[(r.start+r.n)%len(r.buf)] = event{pos: pos{c.Index, c.Ordinal}, kind: c.Kind, cause: c.Cause,
			size: c.Size, gen: c.Gen, key: strings.Clone(c.Key), owner: strings.Clone(c.Owner)}
		r.n++
	}
	r.head = max(r.head, index)
	r.notify()
}

// Restored empties the ring: its events do not lead to the restored state (fsm.ChangeHook).
func (r *eventRing) Restored(index uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.buf)
	r.start, r.n = 0, 0
	r.base, r.head = pos{index + 1, 0}, index
	r.notify()
}

// at returns the i-th retained event (i < r.n); r.mu is held.
func (r *eventRing) at(i int) *event { return &r.buf[(r.start+i)%len(r.buf)] }

// read appends to dst the retained events after cursor and before below (at most max), and
// returns the channel closed at the ring's next change. behind reports that cursor is
// before base: events after it are gone. done reports that every event before below is
// in out or before cursor (the ring has every change of the indexes below below.index).
func (r *eventRing) read(dst []event, cursor, below pos, max int) (out []event, behind, done bool, wake <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cursor.less(r.base) {
		return dst, true, false, r.wake
	}
	i := sort.Search(r.n, func(i int) bool { return cursor.less(r.at(i).pos) })
	for ; i < r.n && len(dst) < max && r.at(i).less(below); i++ {
		dst = append(dst, *r.at(i))
	}
	more := i < r.n && r.at(i).less(below)
	return dst, false, !more && r.head+1 >= below.index, r.wake
}

// state returns the ring's base, head and length.
func (r *eventRing) state() (base pos, head uint64, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.base, r.head, r.n
}

// watchers is the node's registry of WatchEvents streams: their number is bounded, and
// each one's delivered position is read for the lag metric.
type watchers struct {
	max      int
	mu       sync.Mutex
	streams  map[*watcher]struct{}
	listings chan struct{} // a slot per listing in progress (maxListings)
	// nextList (under mu) is when the next listing may start: a listing scans every live key
	// under the FSM's lock, which Raft's apply goroutine waits for, so listings take at most
	// 1/listingPace of the time (a consumer asking for one listing after another cannot
	// slow the node's applies more than that).
	nextList time.Time
	// events, listed and resets count what the streams sent: STORED and REMOVED events,
	// LISTED events, RESETs.
	events, listed, resets prometheus.Counter
}

// listingPace: a listing that took d to build delays the next one by listingPace x d.
const listingPace = 5

// pace waits until a listing may start (nextList), or ctx ends.
func (w *watchers) pace(ctx context.Context) error {
	w.mu.Lock()
	wait := time.Until(w.nextList)
	w.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// built records a listing that took d to build: the next starts no sooner than
// listingPace x d from now.
func (w *watchers) built(d time.Duration) {
	w.mu.Lock()
	w.nextList = time.Now().Add(listingPace * d)
	w.mu.Unlock()
}

// watcher is one stream's delivered index, for the lag metric.
type watcher struct{ delivered atomic.Uint64 }

func newWatchers(max int) *watchers {
	return &watchers{max: max, streams: map[*watcher]struct{}{}, listings: make(chan struct{}, maxListings),
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvoffload_watch_events_total",
			Help: "STORED and REMOVED events sent to WatchEvents consumers by this node."}),
		listed: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvoffload_watch_listed_total",
			Help: "LISTED events sent to WatchEvents consumers by this node (after a RESET)."}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvoffload_watch_resets_total",
			Help: "RESETs sent to WatchEvents consumers: a position older than this node retains, or a consumer behind the retained window."}),
	}
}

var (
	descWatchers = prometheus.NewDesc("kvoffload_watch_consumers", "WatchEvents streams this node serves.", nil, nil)
	descWatchLag = prometheus.NewDesc("kvoffload_watch_lag_entries",
		"Raft entries between this node's last applied change and the furthest-behind WatchEvents consumer's delivered position (0 with none).", nil, nil)
	descRetained = prometheus.NewDesc("kvoffload_watch_retained_events", "Key events this node retains for WatchEvents consumers to resume from.", nil, nil)
	descDropped  = prometheus.NewDesc("kvoffload_watch_dropped_events_total", "Key events dropped from the full retained window (a consumer before them is sent a RESET).", nil, nil)
)

// Describe and Collect export the streams' state at scrape time (prometheus.Collector).
func (s *Service) Describe(ch chan<- *prometheus.Desc) {
	ch <- descWatchers
	ch <- descWatchLag
	ch <- descRetained
	ch <- descDropped
	s.watchers.events.Describe(ch)
	s.watchers.listed.Describe(ch)
	s.watchers.resets.Describe(ch)
}

func (s *Service) Collect(ch chan<- prometheus.Metric) {
	_, head, retained := s.ring.state()
	streams, lag := s.watchers.lag(head)
	ch <- prometheus.MustNewConstMetric(descWatchers, prometheus.GaugeValue, float64(streams))
	ch <- prometheus.MustNewConstMetric(descWatchLag, prometheus.GaugeValue, float64(lag))
	ch <- prometheus.MustNewConstMetric(descRetained, prometheus.GaugeValue, float64(retained))
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(s.ring.dropped.Load()))
	s.watchers.events.Collect(ch)
	s.watchers.listed.Collect(ch)
	s.watchers.resets.Collect(ch)
}

// admit registers a stream, or refuses it with RESOURCE_EXHAUSTED naming the limit.
func (w *watchers) admit(node string) (*watcher, func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.streams) >= w.max {
		return nil, nil, status.Errorf(codes.ResourceExhausted,
			"node %s serves %d watchers, its most (MaxWatchers, --max-watchers): watch through another member or later", node, w.max)
	}
	s := &watcher{}
	w.streams[s] = struct{}{}
	return s, func() {
		w.mu.Lock()
		delete(w.streams, s)
		w.mu.Unlock()
	}, nil
}

// lag returns the number of streams and the largest gap, in Raft entries, between head and
// a stream's delivered index.
func (w *watchers) lag(head uint64) (n int, most uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.streams {
		if d := s.delivered.Load(); d < head {
			most = max(most, head-d)
		}
	}
	return len(w.streams), most
}

// Node is what the event stream needs of the node it serves.
type Node interface {
	// Ready holds a stream until the node has recovered, and refuses it (a gRPC status) if
	// the node does not serve.
	Ready(ctx context.Context) error
	// LastIndex is the last index of this member's Raft log.
	LastIndex() uint64
	// ReadIndex returns once this member has applied every command committed before the
	// call (a gRPC status if it cannot).
	ReadIndex(ctx context.Context) error
	// Idle is the longest a stream may wait for its consumer to take a message.
	Idle() time.Duration
	// Closing is closed when the node shuts down.
	Closing() <-chan struct{}
}

// Service is one node's event stream: the ring of retained events and the streams that
// read it.
type Service struct {
	id       string // the node's ID, in refusals
	ring     *eventRing
	watchers *watchers
	fsm      *fsm.FSM
	node     Node
}

// New returns the event stream of node id, retaining retain events for consumers to resume
// from, and serving at most maxStreams streams at once. It serves once Attach has run.
func New(id string, retain, maxStreams int, node Node) *Service {
	return &Service{id: id, ring: newEventRing(retain), watchers: newWatchers(maxStreams), node: node}
}

// Attach has the ring watch f's changes (fsm.FSM.WatchChanges). It runs before Raft
// restores or replays f, so that the ring's positions follow f's from the start.
func (s *Service) Attach(f *fsm.FSM) {
	s.fsm = f
	f.WatchChanges(s.ring)
}

// Streams is the number of streams being served.
func (s *Service) Streams() int {
	n, _ := s.watchers.lag(0)
	return n
}

// Listings returns the listings in progress and the most that may run at once.
func (s *Service) Listings() (inUse, most int) {
	return len(s.watchers.listings), cap(s.watchers.listings)
}

// Serve serves one WatchEvents stream (the rules at the top of this file).
func (s *Service) Serve(req *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	if err := s.node.Ready(ctx); err != nil {
		return err
	}
	w, release, err := s.watchers.admit(s.id)
	if err != nil {
		return err
	}
	defer release()
	cursor := pos{req.FromIndex, req.FromOrdinal}
	if err := s.reach(ctx, cursor); err != nil {
		return err
	}
	// Headers now: the consumer learns that the stream is admitted before any event.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	below := pos{^uint64(0), 0}
	if req.UntilNow {
		if err := s.node.ReadIndex(ctx); err != nil {
			return err
		}
		below = pos{s.fsm.HookedIndex() + 1, 0}
	}
	// A consumer that takes no message for the idle limit loses the stream, so that it cannot
	// hold a listing slot, or a listing's copy of the keys, by not reading.
	ws := &watchStream{s: s, w: w, sendMsg: transport.IdleSend(ctx, stream.Send, s.node.Idle()), buf: make([]event, 0, watchBatch)}
	reason := fmt.Sprintf("position %s is older than this member retains", cursor)
	for first := true; ; first = false {
		evs, behind, done, wake := s.ring.read(ws.buf[:0], cursor, below, watchBatch)
		if first && req.List {
			behind, reason = true, "a listing was asked for"
		}
		if behind {
			base, _, _ := s.ring.state()
			if !req.List || !first {
				reason += fmt.Sprintf(" (events after %s)", base)
			}
			if cursor, err = ws.list(ctx, reason); err != nil {
				return err
			}
			reason = fmt.Sprintf("consumer fell behind the %d events this member retains", len(s.ring.buf))
			if !cursor.less(below) {
				return nil
			}
			continue
		}
		if len(evs) > 0 {
			if err := ws.send(evs); err != nil {
				return err
			}
			cursor = evs[len(evs)-1].pos
			w.delivered.Store(cursor.index)
		} else if _, head, _ := s.ring.state(); cursor.index < head {
			w.delivered.Store(head) // nothing for it up to head: it is not behind
		}
		if done {
			return nil
		}
		if len(evs) == watchBatch {
			continue
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.node.Closing():
			return status.Error(codes.Unavailable, "node is shutting down")
		}
	}
}

// reach waits until this member's Raft log reaches p (at most CatchUp): the index of p's
// change, or for ordinal 0 the index before. It refuses the stream OUT_OF_RANGE if the log
// does not: a position no member's log has is a consumer's mistake, one a lagging follower
// lacks is served by another member.
func (s *Service) reach(ctx context.Context, p pos) error {
	need := p.index
	if p.ordinal == 0 && need > 0 {
		need--
	}
	deadline := time.Now().Add(CatchUp)
	for {
		last := s.node.LastIndex()
		if need <= last {
			return nil
		}
		if time.Now().After(deadline) {
			return status.Errorf(codes.OutOfRange, "position %s is beyond node %s's Raft log (last index %d)", p, s.id, last)
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.node.Closing():
			return status.Error(codes.Unavailable, "node is shutting down")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// watchStream is one WatchEvents stream's sending side.
type watchStream struct {
	s       *Service
	w       *watcher
	sendMsg func(*pb.WatchResponse) error // the stream's Send, bounded by the idle limit
	buf     []event
	out     []*pb.Event // reused: one response's events
}

// send sends evs in one response.
func (ws *watchStream) send(evs []event) error {
	ws.out = ws.out[:0]
	for i := range evs {
		e := &evs[i]
		pe := &pb.Event{Index: e.index, Ordinal: e.ordinal, Key: e.key, Size: uint64(e.size), Node: e.owner, Generation: e.gen}
		if e.kind == fsm.ChangeStored {
			pe.Kind = pb.EventKind_EVENT_KIND_STORED
		} else {
			pe.Kind, pe.Cause = pb.EventKind_EVENT_KIND_REMOVED, pb.RemoveCause(e.cause)
		}
		ws.out = append(ws.out, pe)
	}
	ws.s.watchers.events.Add(float64(len(evs)))
	return ws.sendMsg(&pb.WatchResponse{Events: ws.out})
}

// list sends a RESET and the listing of every live key, and returns its position.
func (ws *watchStream) list(ctx context.Context, why string) (pos, error) {
	select {
	case ws.s.watchers.listings <- struct{}{}:
	case <-ctx.Done():
		return pos{}, status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-ws.s.watchers.listings }()
	if err := ws.s.watchers.pace(ctx); err != nil {
		return pos{}, err
	}
	began := time.Now()
	keys, applied := ws.s.fsm.List()
	ws.s.watchers.built(time.Since(began))
	at := pos{applied + 1, 0}
	ws.s.watchers.resets.Inc()
	reset := &pb.Event{Kind: pb.EventKind_EVENT_KIND_RESET, Index: at.index, Listed: uint64(len(keys)), Reason: why}
	if err := ws.sendMsg(&pb.WatchResponse{Events: []*pb.Event{reset}}); err != nil {
		return pos{}, err
	}
	for len(keys) > 0 {
		k := min(len(keys), watchBatch)
		ws.out = ws.out[:0]
		for _, l := range keys[:k] {
			ws.out = append(ws.out, &pb.Event{Kind: pb.EventKind_EVENT_KIND_LISTED, Index: at.index,
				Key: l.Key, Size: uint64(l.Size), Node: l.Owner, Generation: l.Gen})
		}
		if err := ws.sendMsg(&pb.WatchResponse{Events: ws.out}); err != nil {
			return pos{}, err
		}
		ws.s.watchers.listed.Add(float64(k))
		keys = keys[k:]
	}
	ws.w.delivered.Store(applied)
	return at, nil
}
