package node

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/internal/watch"
)

// watchAll returns the events Watch yields after from until it has caught up, through the
// members at addrs.
func watchAll(t *testing.T, from client.Position, addrs ...string) []client.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addrs...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out []client.Event
	for ev, err := range c.Watch(ctx, from, client.WatchUntilNow()) {
		if err != nil {
			t.Fatalf("watch from %s: %v", from, err)
		}
		out = append(out, ev)
	}
	return out
}

// view is a consumer's picture of the stored keys, built from events; apply fails the test
// on an event the stream's rules forbid.
type view struct {
	keys    map[string]uint64 // key -> generation
	listing uint64
}

func (v *view) apply(t *testing.T, ev client.Event) {
	t.Helper()
	switch ev.Kind {
	case client.EventReset:
		v.keys, v.listing = map[string]uint64{}, ev.Listed
	case client.EventListed:
		if v.listing == 0 {
			t.Fatalf("listed %s outside a listing", ev.Key)
		}
		v.listing--
		v.keys[ev.Key] = ev.Generation
	case client.EventStored:
		if _, ok := v.keys[ev.Key]; ok {
			t.Fatalf("%s stored at %s while stored", ev.Key, ev.Pos)
		}
		v.keys[ev.Key] = ev.Generation
	case client.EventRemoved:
		if g, ok := v.keys[ev.Key]; !ok || g != ev.Generation {
			t.Fatalf("%s removed at %s (generation %d) while not stored in that generation (%d, %v)", ev.Key, ev.Pos, ev.Generation, g, ok)
		}
		delete(v.keys, ev.Key)
	}
}

// live returns n's live keys and their generations.
func live(n *Node) map[string]uint64 {
	out := map[string]uint64{}
	n.FSM().ForEach(func(e fsm.Entry) bool { out[e.Key] = e.Gen; return true })
	return out
}

// checkView applies evs to a fresh view and fails unless it ends equal to n's live keys.
func checkView(t *testing.T, evs []client.Event, n *Node) {
	t.Helper()
	v := &view{keys: map[string]uint64{}}
	for _, ev := range evs {
		v.apply(t, ev)
	}
	if want := live(n); !mapsEqual(v.keys, want) {
		t.Fatalf("the events lead to %d keys, the metadata holds %d", len(v.keys), len(want))
	}
}

func mapsEqual(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestWatchCommitOrderAndResume: batches offloaded and removed in turn through random members
// appear as one event per key per change, in commit order, through any member; resuming
// from any position yields exactly the events after it.
func TestWatchCommitOrderAndResume(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 32))
	nodes, _ := openNamed(t, "a", "b", "c")
	var stored [][]string // the keys of each offload, in commit order
	var removed []string
	for b := range 12 {
		nd := nodes[rng.IntN(len(nodes))]
		keys := keysN("w"+string(rune('a'+b)), 1+rng.IntN(5))
		mustOffload(t, nd, objects(seed, 1<<10, keys...))
		stored = append(stored, keys)
		if b%4 == 3 { // remove one key of an earlier batch
			k := stored[rng.IntN(len(stored))][0]
			if !slices.Contains(removed, k) {
				if _, err := nodes[rng.IntN(len(nodes))].Remove(context.Background(), []string{k}); err != nil {
					t.Fatal(err)
				}
				removed = append(removed, k)
			}
		}
	}
	leader := leaderOf(t, nodes...)
	var follower *Node
	for _, nd := range nodes {
		if nd != leader {
			follower = nd
		}
	}
	all := watchAll(t, client.Position{}, follower.APIAddr())
	checkView(t, all, leader)
	// One stored event per key, in commit order; removes after their store, with their cause.
	var got []string
	last := client.Position{}
	for _, ev := range all {
		if !last.Less(ev.Pos) {
			t.Fatalf("event at %s after %s", ev.Pos, last)
		}
		last = ev.Pos
		switch ev.Kind {
		case client.EventStored:
			got = append(got, ev.Key)
			if ev.Size != 1<<10 || ev.Node == "" || ev.Generation == 0 {
				t.Fatalf("stored event %+v", ev)
			}
		case client.EventRemoved:
			if ev.Cause != "removed" || !slices.Contains(removed, ev.Key) {
				t.Fatalf("removed event %+v", ev)
			}
		default:
			t.Fatalf("%s event from a log never compacted: %+v", ev.Kind, ev)
		}
	}
	if want := slices.Concat(stored...); !slices.Equal(got, want) {
		t.Fatalf("stored events:\n got %v\nwant %v", got, want)
	}
	// Resume from every position, through another member each time.
	for i, ev := range all {
		nd := nodes[i%len(nodes)]
		rest := watchAll(t, ev.Pos, nd.APIAddr())
		if !slices.EqualFunc(rest, all[i+1:], func(a, b client.Event) bool { return a == b }) {
			t.Fatalf("resume from %s through %s: %d events, want %d", ev.Pos, nd.cfg.ID, len(rest), len(all)-i-1)
		}
	}
	t.Logf("%d events, %d resumes checked", len(all), len(all))
}

// TestWatchAcrossRestartAndCompaction: a member restarted without a snapshot replays its log
// into the stream, so a resume yields exactly the rest; after its log is compacted into a
// snapshot and it restarts, a resume from before the snapshot gets a reset, the listing of
// the state at one position, then the rest.
func TestWatchAcrossRestartAndCompaction(t *testing.T) {
	seed := testkit.Seed(t)
	nodes, cfgs := openNamed(t, "a", "b", "c")
	for b := range 4 {
		mustOffload(t, nodes[0], objects(seed, 1<<10, keysN("r"+string(rune('a'+b)), 3)...))
	}
	first := watchAll(t, client.Position{}, nodes[2].APIAddr())
	mid := first[4].Pos

	// Restart c without a snapshot: its log is replayed.
	mustClose(t, nodes[2])
	nodes[2] = mustOpen(t, cfgs[2])
	mustOffload(t, nodes[1], objects(seed, 1<<10, keysN("rz", 2)...))
	all := watchAll(t, client.Position{}, nodes[2].APIAddr())
	if len(all) != len(first)+2 || !slices.Equal(all[:len(first)], first) {
		t.Fatalf("after a restart: %d events, want the %d before and 2 more", len(all), len(first))
	}
	rest := watchAll(t, mid, nodes[2].APIAddr())
	if !slices.Equal(rest, all[5:]) {
		t.Fatalf("resume from %s after a restart: %d events, want %d", mid, len(rest), len(all)-5)
	}

	// Compact c's log into a snapshot and restart it: a resume from before the snapshot
	// index is reset and listed.
	if err := nodes[2].Raft().Snapshot(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, nodes[2])
	nodes[2] = mustOpen(t, cfgs[2])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, nodes[2].APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []client.Event
	listed := -1
	for ev, err := range c.Watch(ctx, mid) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
		if len(got) == 1 {
			if ev.Kind != client.EventReset {
				t.Fatalf("resume from %s after compaction: first event %+v, want a reset", mid, ev)
			}
			listed = int(ev.Listed)
		}
		if len(got) == 1+listed { // the listing is complete: change the state
			if _, err := nodes[0].Remove(ctx, []string{keyOf("ra", 0)}); err != nil {
				t.Fatal(err)
			}
			mustOffload(t, nodes[1], objects(seed, 1<<10, keyOf("ry", 0)))
		}
		if len(got) == 1+listed+2 {
			break
		}
	}
	reset := got[0]
	for _, ev := range got[1 : 1+listed] {
		if ev.Kind != client.EventListed || ev.Pos != reset.Pos {
			t.Fatalf("listing at %s: %+v", reset.Pos, ev)
		}
	}
	after := got[1+listed:]
	if after[0].Kind != client.EventRemoved || after[0].Key != keyOf("ra", 0) || after[1].Kind != client.EventStored || after[1].Key != keyOf("ry", 0) {
		t.Fatalf("after the listing: %+v, want the remove and the store", after)
	}
	if want := watchAll(t, reset.Pos, nodes[0].APIAddr()); !slices.Equal(after, want) {
		t.Fatalf("after the listing at %s: %+v; the leader has %+v", reset.Pos, after, want)
	}
	waitApplied(t, nodes[2], nodes[0])
	checkView(t, got, nodes[0])
	t.Logf("reset at %s (%s), %d listed, then %d", reset.Pos, reset.Reason, reset.Listed, len(after))
}

// TestWatchEvictionAndSlowConsumer: keys evicted for capacity appear removed with cause
// "evicted"; a consumer further behind than the retained window gets a reset and a listing,
// and its view is still the store's.
func TestWatchEvictionAndSlowConsumer(t *testing.T) {
	seed := testkit.Seed(t)
	cfg := testConfig(t.TempDir())
	cfg.Capacity, cfg.BucketSize = 16<<20, 4<<20
	cfg.APIAddr = freeAddr(t)
	cfg.WatchRetain = 100
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	for b := range 40 {
		mustOffload(t, n, objects(seed, 1<<20, keyOf("ev", b)))
	}
	if _, err := n.Remove(context.Background(), []string{keyOf("ev", 39)}); err != nil {
		t.Fatal(err)
	}
	all := watchAll(t, client.Position{}, n.APIAddr())
	causes := map[string]int{}
	for _, ev := range all {
		if ev.Kind == client.EventRemoved {
			causes[ev.Cause]++
		}
	}
	if causes["evicted"] == 0 || causes["removed"] != 1 || all[0].Kind != client.EventStored {
		t.Fatalf("removal causes %v (first event %+v), want evictions and one removed", causes, all[0])
	}
	checkView(t, all, n)

	for b := range 150 { // more events than the window retains
		mustOffload(t, n, objects(seed, 1<<10, keyOf("small", b)))
	}
	behind := watchAll(t, client.Position{Index: 1}, n.APIAddr())
	if behind[0].Kind != client.EventReset {
		t.Fatalf("a consumer behind the window: first event %+v, want a reset", behind[0])
	}
	checkView(t, behind, n)
	t.Logf("causes %v; reset %q listing %d keys", causes, behind[0].Reason, behind[0].Listed)
}

// TestWatchRefusals: a member serving its most watchers refuses one more, naming the limit;
// a position beyond every member's log is refused OUT_OF_RANGE, not waited for forever.
func TestWatchRefusals(t *testing.T) {
	defer func(d time.Duration) { watch.CatchUp = d }(watch.CatchUp)
	watch.CatchUp = 100 * time.Millisecond
	cfg := testConfig(t.TempDir())
	cfg.APIAddr = freeAddr(t)
	cfg.MaxWatchers = 1
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	cc, err := grpc.NewClient(n.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	kv := pb.NewKVOffloadClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := kv.WatchEvents(ctx, &pb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Header(); err != nil { // the stream is admitted
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n.watch.Streams() == 1 {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("the first stream was never admitted")
		}
	}
	second, err := kv.WatchEvents(ctx, &pb.WatchRequest{})
	if err == nil {
		_, err = second.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "MaxWatchers") {
		t.Fatalf("a second watcher over MaxWatchers 1: %v", err)
	}
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n.watch.Streams() == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("the first stream was never released")
		}
	}
	far, err := kv.WatchEvents(ctx, &pb.WatchRequest{FromIndex: 1 << 62})
	if err == nil {
		_, err = far.Recv()
	}
	if status.Code(err) != codes.OutOfRange {
		t.Fatalf("from far beyond the log: %v", err)
	}
	c, err := client.Dial(ctx, n.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, err := range c.Watch(ctx, client.Position{Index: 1 << 62}) {
		if !errors.Is(err, kvoffload.ErrInvalidArgument) {
			t.Fatalf("client Watch from beyond the log: %v", err)
		}
	}
}
