package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/internal/wire"
)

// Position is a place in the cluster's event stream (WatchEvents): the Ordinal-th key change
// of the Raft entry at Index; Ordinal 0 is the point before that entry's first change.
// Positions are the same on every member. The zero Position is before every event.
type Position struct {
	Index   uint64
	Ordinal uint32
}

// Less reports whether p comes before q.
func (p Position) Less(q Position) bool {
	return p.Index < q.Index || (p.Index == q.Index && p.Ordinal < q.Ordinal)
}

// String returns p as "index.ordinal", the form ParsePosition reads.
func (p Position) String() string { return fmt.Sprintf("%d.%d", p.Index, p.Ordinal) }

// ParsePosition reads "index.ordinal" or "index" (ordinal 0).
func ParsePosition(s string) (Position, error) {
	is, os, dotted := strings.Cut(s, ".")
	i, err := strconv.ParseUint(is, 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("position %q: index: %w", s, err)
	}
	p := Position{Index: i}
	if dotted {
		o, err := strconv.ParseUint(os, 10, 32)
		if err != nil {
			return Position{}, fmt.Errorf("position %q: ordinal: %w", s, err)
		}
		p.Ordinal = uint32(o)
	}
	return p, nil
}

// EventKind is what an Event reports.
type EventKind uint8

// The kinds of event.
const (
	EventStored  EventKind = 1 // Key was committed (Size, Node, Generation)
	EventRemoved EventKind = 2 // Key was removed (Cause; Size, Node, Generation of the removed version)
	// EventReset: the consumer's view is void. Listed EventListed events follow, every key
	// stored at Pos; then the events after Pos.
	EventReset  EventKind = 3
	EventListed EventKind = 4 // Key is stored at the preceding reset's Pos
)

// String returns the kind's name as `storenode events --json` prints it.
func (k EventKind) String() string {
	switch k {
	case EventStored:
		return "stored"
	case EventRemoved:
		return "removed"
	case EventReset:
		return "reset"
	case EventListed:
		return "listed"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one event of the stream.
type Event struct {
	Kind       EventKind
	Pos        Position
	Key        string
	Size       uint64 // payload bytes
	Node       string // the node holding (or that held) the bytes
	Generation uint64
	// Cause (EventRemoved only): "removed" (a client's Remove), "evicted" (capacity),
	// "owner_left" (the owner left the cluster) or "pruned" (the store dropped it: its
	// bucket was lost or its record corrupt).
	Cause  string
	Listed uint64 // EventReset only: the EventListed events that follow
	Reason string // EventReset only: why
}

// WatchOption changes what Watch asks for.
type WatchOption func(*kvoffloadv1.WatchRequest)

// WatchUntilNow ends the stream once every event committed when Watch was called was
// yielded (after a reconnect, when the member then reached connected).
func WatchUntilNow() WatchOption { return func(r *kvoffloadv1.WatchRequest) { r.UntilNow = true } }

// WatchList begins the stream with a reset and the listing of every stored key, whatever
// from: the way for a consumer without a view to get one.
func WatchList() WatchOption { return func(r *kvoffloadv1.WatchRequest) { r.List = true } }

var causeNames = map[kvoffloadv1.RemoveCause]string{
	kvoffloadv1.RemoveCause_REMOVE_CAUSE_REMOVED: "removed", kvoffloadv1.RemoveCause_REMOVE_CAUSE_EVICTED: "evicted",
	kvoffloadv1.RemoveCause_REMOVE_CAUSE_OWNER_LEFT: "owner_left", kvoffloadv1.RemoveCause_REMOVE_CAUSE_PRUNED: "pruned",
}

// Watch yields the cluster's key events after from, in Raft order (docs/api.md "Watching
// the stored keys"). When the member's stream breaks (it restarted, lost its leader, or
// refused the stream) Watch reconnects, to the next member after a backoff, and resumes
// after the last event it yielded: a resume never skips or repeats an event, and where the
// member no longer has the events after it, a reset and a listing come instead. A stream
// broken during a listing is resumed with a new listing (WatchList).
//
// The sequence ends when ctx ends, when the loop stops, or with an error: yielded as the
// pair's error, with a zero Event, and last. Errors: kvoffload.ErrClosed; ErrUnavailable
// with the context's error; ErrDenied; ErrInvalidArgument when every member refused from
// as beyond its log; ErrProtocol when a member sent an event out of order.
// With WatchUntilNow the sequence ends without an error once it has caught up.
func (c *Client) Watch(ctx context.Context, from Position, opts ...WatchOption) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		w := &watchLoop{c: c, resume: from}
		for _, o := range opts {
			o(&w.req)
		}
		err := w.run(ctx, yield)
		if err != nil && !errors.Is(err, errStopped) {
			yield(Event{}, err)
		}
	}
}

// errStopped: the consumer's loop stopped.
var errStopped = errors.New("client: watch loop stopped")

// watchLoop is one Watch's state across reconnections.
type watchLoop struct {
	c   *Client
	req kvoffloadv1.WatchRequest
	// resume is the position after which the next stream starts: the last event yielded,
	// or, during a listing, the position before its reset (and relist is then set).
	resume  Position
	listing uint64 // LISTED events still to come of the current listing
	relist  bool   // the stream broke during a listing: the next asks for a new one
	pending Position
}

func (w *watchLoop) run(ctx context.Context, yield func(Event, error) bool) error {
	c := w.c
	delay := c.retryBackoff()
	refusals := 0 // consecutive members that refused the stream without sending anything
	for {
		if c.closed.Load() {
			return fmt.Errorf("%w: Watch", kvoffload.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: Watch: %w", kvoffload.ErrUnavailable, err)
		}
		i := int(c.cur.Load())
		got, err := w.stream(ctx, c.members[i], yield)
		if err == nil || errors.Is(err, errStopped) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: Watch: %w (last error: %w)", kvoffload.ErrUnavailable, ctx.Err(), err)
		}
		if got {
			refusals = 0
			delay.Reset()
		}
		s, _ := status.FromError(err)
		switch {
		case s.Code() == codes.Unauthenticated || s.Code() == codes.PermissionDenied:
			return fmt.Errorf("%w: Watch: %w", kvoffload.ErrDenied, err)
		case errors.Is(err, kvoffload.ErrProtocol):
			return err
		case s.Code() == codes.OutOfRange || s.Code() == codes.ResourceExhausted || s.Code() == codes.InvalidArgument:
			if refusals++; refusals >= len(c.members) {
				if s.Code() == codes.ResourceExhausted {
					return fmt.Errorf("%w: Watch: every member refused: %w", kvoffload.ErrUnavailable, err)
				}
				return fmt.Errorf("%w: Watch from %s: every member refused: %w", kvoffload.ErrInvalidArgument, w.resume, err)
			}
		case wire.RefusalReason(err) != "" || retryable(err) || s.Code() == codes.FailedPrecondition:
		default:
			return permanent("Watch", err)
		}
		c.lg.Debug("watch: reconnecting", "addr", c.members[i].addr, "resume", w.resume.String(), "err", err)
		c.failover(i)
		if serr := sleep(ctx, delay.NextBackOff()); serr != nil {
			return fmt.Errorf("%w: Watch: %w (last error: %w)", kvoffload.ErrUnavailable, serr, err)
		}
	}
}

// stream runs one WatchEvents stream on m, yielding its events; got reports that it
// received any. It returns nil when the stream ended (WatchUntilNow), errStopped when the
// consumer stopped.
func (w *watchLoop) stream(ctx context.Context, m *member, yield func(Event, error) bool) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &kvoffloadv1.WatchRequest{FromIndex: w.resume.Index, FromOrdinal: w.resume.Ordinal,
		UntilNow: w.req.UntilNow, List: w.req.List || w.relist}
	st, err := m.kv.WatchEvents(ctx, req)
	if err != nil {
		return false, err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			if isEOF(err) {
				if w.listing > 0 {
					return got, fmt.Errorf("%w: WatchEvents ended with %d listed keys missing", kvoffload.ErrProtocol, w.listing)
				}
				return got, nil
			}
			if w.listing > 0 {
				w.relist = true
			}
			return got, err
		}
		got = true
		for _, pe := range resp.GetEvents() {
			ev, err := w.accept(pe)
			if err != nil {
				return got, err
			}
			if !yield(ev, nil) {
				return got, errStopped
			}
		}
	}
}

// accept checks pe against the stream's order, advances the resume position, and returns
// pe as an Event.
func (w *watchLoop) accept(pe *kvoffloadv1.Event) (Event, error) {
	ev := Event{Kind: EventKind(pe.GetKind()), Pos: Position{pe.GetIndex(), pe.GetOrdinal()}, Key: pe.GetKey(),
		Size: pe.GetSize(), Node: pe.GetNode(), Generation: pe.GetGeneration()}
	switch ev.Kind {
	case EventStored, EventRemoved:
		if w.listing > 0 || !w.resume.Less(ev.Pos) || ev.Pos.Ordinal == 0 {
			return ev, fmt.Errorf("%w: WatchEvents: event at %s after %s (%d listed keys to come)", kvoffload.ErrProtocol, ev.Pos, w.resume, w.listing)
		}
		if ev.Kind == EventRemoved {
			ev.Cause = causeNames[pe.GetCause()]
			if ev.Cause == "" {
				ev.Cause = pe.GetCause().String()
			}
		}
		w.resume = ev.Pos
	case EventReset:
		ev.Listed, ev.Reason = pe.GetListed(), pe.GetReason()
		if ev.Pos.Ordinal != 0 {
			return ev, fmt.Errorf("%w: WatchEvents: reset at %s", kvoffload.ErrProtocol, ev.Pos)
		}
		w.listing, w.pending, w.relist, w.req.List = ev.Listed, ev.Pos, false, false
		if w.listing == 0 {
			w.resume = ev.Pos
		}
	case EventListed:
		if w.listing == 0 || ev.Pos != w.pending {
			return ev, fmt.Errorf("%w: WatchEvents: listed key at %s outside a listing", kvoffload.ErrProtocol, ev.Pos)
		}
		if w.listing--; w.listing == 0 {
			w.resume = w.pending
		}
	default:
		return ev, fmt.Errorf("%w: WatchEvents: event of kind %d", kvoffload.ErrProtocol, pe.GetKind())
	}
	return ev, nil
}
