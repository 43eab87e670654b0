package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/storetest"
)

// localSocketPath is a short socket path (sun_path holds 107 bytes; t.TempDir can be long).
func localSocketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kvl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "s")
}

// openLocal opens an embedded node with only a local socket, and a client on it.
func openLocal(t *testing.T, lim Local) (*Node, *client.Client) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	lim.Socket = localSocketPath(t)
	cfg.Local = lim
	n := mustOpen(t, cfg)
	t.Cleanup(func() { mustClose(t, n) })
	return n, dialLocal(t, n)
}

func dialLocal(t *testing.T, n *Node) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.DialOptions(ctx, client.Options{}, "unix://"+n.LocalSocket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// checkSums asserts that each key reads back Found and that its metadata checksum is the
// xxhash64 of the bytes read.
func checkSums(t *testing.T, n *Node, keys []string) map[string][]byte {
	t.Helper()
	res, err := getAll(context.Background(), n, keys)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, r := range res {
		e, ok := n.FSM().Lookup(r.Key)
		if r.Status != kvoffload.Found || !ok {
			t.Fatalf("%s: %s %s (metadata %v)", r.Key, r.Status, r.Reason, ok)
		}
		if got := xxhash.Sum64(r.Value); got != e.Sum || int(e.Size) != len(r.Value) {
			t.Fatalf("%s: metadata sum %x size %d, bytes hash %x size %d", r.Key, e.Sum, e.Size, got, len(r.Value))
		}
		out[r.Key] = r.Value
	}
	return out
}

// TestLocalRoundTrip: the Store calls and the zero-copy Region through the local socket.
func TestLocalRoundTrip(t *testing.T) {
	seed := testkit.Seed(t)
	n, c := openLocal(t, Local{})
	ctx := context.Background()
	keys := []string{keyOf("a", 0), keyOf("a", 1), keyOf("a", 2)}
	objs := objects(seed, 300<<10, keys...)
	res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), objs)
	if err != nil || res[0].Outcome != kvoffload.Stored || res[2].Outcome != kvoffload.Stored {
		t.Fatalf("%v %+v", err, res)
	}
	got, err := c.BatchGet(ctx, append(keys, keyOf("none", 0)))
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range objs {
		if got[i].Status != kvoffload.Found || !bytes.Equal(got[i].Value, o.Value) {
			t.Fatalf("%s: %s %s", o.Key, got[i].Status, got[i].Reason)
		}
	}
	if got[3].Status != kvoffload.NotFound || got[3].Code != kvoffload.CodeNotFound {
		t.Fatalf("missing key: %+v", got[3])
	}
	bufs := [][]byte{make([]byte, 300<<10), make([]byte, 10)}
	into, err := c.BatchGetInto(ctx, keys[:2], bufs)
	if err != nil || into[0].Status != kvoffload.Found || !bytes.Equal(into[0].Value, objs[0].Value) ||
		into[1].Status != kvoffload.ShortBuffer || into[1].Size != 300<<10 {
		t.Fatalf("%v %+v", err, into)
	}
	checkSums(t, n, keys)

	r, err := c.NewRegion(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	copy(r.Bytes()[4096:], "zero-copy value")
	res, err = c.OffloadFrom(ctx, kvoffload.NewTxnID(), r, []client.Desc{{Key: keyOf("z", 0), Offset: 4096, Length: 15}})
	if err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("%v %+v", err, res)
	}
	g, err := c.GetInto(ctx, r, []client.Desc{{Key: keyOf("z", 0), Offset: 0, Length: 100}, {Key: keyOf("a", 0), Offset: 100, Length: 10}})
	if err != nil || string(g[0].Value) != "zero-copy value" || &g[0].Value[0] != &r.Bytes()[0] ||
		g[1].Status != kvoffload.ShortBuffer || g[1].Size != 300<<10 {
		t.Fatalf("%v %+v", err, g)
	}
	if _, err := c.OffloadFrom(ctx, kvoffload.NewTxnID(), r, []client.Desc{{Key: "k", Offset: 1 << 20, Length: 1}}); !errors.Is(err, kvoffload.ErrInvalidArgument) {
		t.Fatalf("out of bounds on the client: %v", err)
	}
}

// TestLocalValuesInRegion: BatchOffload of values the caller placed in a Region travels as
// descriptors of that region: the node maps no staging region and the values read back;
// a batch that is only partly in the region still goes through staging.
func TestLocalValuesInRegion(t *testing.T) {
	seed := testkit.Seed(t)
	n, c := openLocal(t, Local{})
	ctx := context.Background()
	const block = 64 << 10
	r, err := c.NewRegion(8 * block)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	mem := r.Bytes()
	rng := rand.New(rand.NewPCG(seed, 3))
	var objs []kvoffload.Object
	for i := range 4 {
		v := mem[i*block : (i+1)*block]
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		objs = append(objs, kvoffload.Object{Key: keyOf("inregion", i), Value: v})
	}
	res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), objs)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res {
		if x.Outcome != kvoffload.Stored {
			t.Fatalf("%s: %s %s", x.Key, x.Outcome, x.Reason)
		}
	}
	if m := mappedRegions(n); m != 1 {
		t.Fatalf("%d regions mapped after offloading values in the caller's region, want 1 (no staging)", m)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	got, err := c.BatchGet(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if g.Status != kvoffload.Found || !bytes.Equal(g.Value, objs[i].Value) {
			t.Fatalf("%s: %s %s", g.Key, g.Status, g.Reason)
		}
	}
	mixed := []kvoffload.Object{{Key: keyOf("mixed", 0), Value: mem[:block]}, {Key: keyOf("mixed", 1), Value: bytes.Clone(mem[block : 2*block])}}
	if res, err = c.BatchOffload(ctx, kvoffload.NewTxnID(), mixed); err != nil || res[0].Outcome != kvoffload.Stored || res[1].Outcome != kvoffload.Stored {
		t.Fatalf("a batch partly in the region: %v %+v", err, res)
	}
	checkSums(t, n, append(keys, mixed[0].Key, mixed[1].Key))
}

// TestLocalInRegionReturnsReleased: a BatchOffload of values in the caller's region returns,
// even when its context ends mid-call, only once the transaction the node began for it has
// ended, so the caller may reuse its pages at once: nothing it writes afterwards is stored.
func TestLocalInRegionReturnsReleased(t *testing.T) {
	seed := testkit.Seed(t)
	n, c := openLocal(t, Local{})
	const block, blocks = 1 << 20, 16
	r, err := c.NewRegion(block * blocks)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	mem := r.Bytes()
	rng := rand.New(rand.NewPCG(seed, 4))
	cut := 0
	for try := 0; try < 40 && cut < 5; try++ {
		for i := range mem {
			mem[i] = 'A'
		}
		objs := make([]kvoffload.Object, blocks)
		for i := range objs {
			objs[i] = kvoffload.Object{Key: keyOf(fmt.Sprintf("drain%d", try), i), Value: mem[i*block : (i+1)*block]}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+rng.IntN(2000))*time.Microsecond)
		_, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), objs)
		cancel()
		if err == nil {
			continue
		}
		cut++
		// The transaction has ended; a late handler of the cut call may still hold the region
		// for a moment, to find that transaction's result, and stores nothing.
		testkit.Eventually(t, 5*time.Second, "the region released after the cut call", func() bool { return regionRefs(n) == 0 })
		for i := range mem {
			mem[i] = 'B'
		}
		keys := make([]string, blocks)
		for i := range keys {
			keys[i] = objs[i].Key
		}
		got, err := c.BatchGet(context.Background(), keys)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			if g.Status == kvoffload.Found && bytes.IndexByte(g.Value, 'B') >= 0 {
				t.Fatalf("try %d: %s was stored with bytes written after BatchOffload returned", try, g.Key)
			}
		}
	}
	if cut == 0 {
		t.Skip("no call was cut short by its deadline on this machine")
	}
	t.Logf("%d calls cut short by their deadline; each returned with the region released", cut)
}

// TestLocalRegionOutlivesRestart: a client's Region survives its node's restart: the next
// call naming it registers the same memory again, so offloads from it and reads into it go on
// in place (the restarted node maps exactly that one region) and see the same bytes.
func TestLocalRegionOutlivesRestart(t *testing.T) {
	seed := testkit.Seed(t)
	cfg := testConfig(t.TempDir())
	cfg.Local.Socket = localSocketPath(t)
	n := mustOpen(t, cfg)
	c := dialLocal(t, n)
	const block = 64 << 10
	r, err := c.NewRegion(4 * block)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rng := rand.New(rand.NewPCG(seed, 5))
	mem := r.Bytes()
	for i := range mem {
		mem[i] = byte(rng.Uint32())
	}
	offload := func(name string) {
		t.Helper()
		objs := []kvoffload.Object{{Key: keyOf(name, 0), Value: mem[:block]}, {Key: keyOf(name, 1), Value: mem[block : 2*block]}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), objs)
		if err != nil || res[0].Outcome != kvoffload.Stored || res[1].Outcome != kvoffload.Stored {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
	}
	offload("before")
	mustClose(t, n)
	n = mustOpen(t, cfg)
	defer mustClose(t, n)
	offload("after")
	if m := mappedRegions(n); m != 1 {
		t.Fatalf("the restarted node maps %d regions, want 1: the client's region registered again (not streamed, not staged)", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := c.GetInto(ctx, r, []client.Desc{{Key: keyOf("before", 1), Offset: 2 * block, Length: block}})
	if err != nil || got[0].Status != kvoffload.Found || !bytes.Equal(got[0].Value, mem[block:2*block]) {
		t.Fatalf("GetInto after the restart: %v %+v", err, got)
	}
	checkSums(t, n, []string{keyOf("before", 0), keyOf("after", 0), keyOf("after", 1)})
}

// TestLocalCloseDoesNotWaitForTheTransaction: closing a region while a transaction reads it
// in place is answered at once (new calls on the region are refused), so the client's other
// calls on its registration connection do not queue behind that transaction; the node unmaps
// the region once the transaction has ended.
func TestLocalCloseDoesNotWaitForTheTransaction(t *testing.T) {
	n, c := openLocal(t, Local{})
	r, err := c.NewRegion(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	failpoint.EnableFunc(failpoint.MetaCommitted, 0, func() error {
		once.Do(func() { close(held); <-release })
		return nil
	})
	defer failpoint.Disable(failpoint.MetaCommitted)
	done := make(chan error, 1)
	go func() {
		_, err := c.OffloadFrom(context.Background(), kvoffload.NewTxnID(), r, []client.Desc{{Key: keyOf("held", 0), Offset: 0, Length: 4096}})
		done <- err
	}()
	<-held
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("Region.Close waited for the transaction reading the region")
	}
	if _, err := c.NewRegion(4096); err != nil {
		t.Fatalf("a new region while the closed one's transaction runs: %v", err)
	}
	counted := func() int {
		n.regions.mu.Lock()
		defer n.regions.mu.Unlock()
		return n.regions.count
	}
	if got := counted(); got != 2 {
		t.Fatalf("%d regions counted while the closed one's transaction runs, want 2 (it stays mapped and counted)", got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the offload reading the closed region: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "the closed region unmapped after its transaction", func() bool {
		return counted() == 1 && mappedRegions(n) == 1
	})
}

// TestLocalRegionCloseAfterClientClose: closing a Region after its Client neither dials the
// node again nor fails: the client's close ended the registration, and the node unmapped the
// region when the connection closed.
func TestLocalRegionCloseAfterClientClose(t *testing.T) {
	n, c := openLocal(t, Local{})
	r, err := c.NewRegion(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the registration connection closed", func() bool {
		n.regions.mu.Lock()
		defer n.regions.mu.Unlock()
		return len(n.regions.conns) == 0 && len(n.regions.byID) == 0
	})
	if err := r.Close(); err != nil {
		t.Fatalf("Region.Close after Client.Close: %v", err)
	}
	n.regions.mu.Lock()
	conns := len(n.regions.conns)
	n.regions.mu.Unlock()
	if conns != 0 {
		t.Fatalf("Region.Close after Client.Close opened %d registration connections", conns)
	}
}

// mappedRegions is the number of regions the node has mapped.
func mappedRegions(n *Node) int {
	n.regions.mu.Lock()
	defer n.regions.mu.Unlock()
	return len(n.regions.byID)
}

// regionRefs is the number of operations holding any of the node's regions.
func regionRefs(n *Node) int {
	n.regions.mu.Lock()
	rs := make([]*region, 0, len(n.regions.byID))
	for _, r := range n.regions.byID {
		rs = append(rs, r)
	}
	n.regions.mu.Unlock()
	refs := 0
	for _, r := range rs {
		r.mu.Lock()
		refs += r.refs
		r.mu.Unlock()
	}
	return refs
}

// TestLocalConformance: the client on the local path passes the Store conformance suite.
func TestLocalConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) kvoffload.Store {
		_, c := openLocal(t, Local{})
		return c
	})
}

// TestLocalScribble: a client rewriting its region while offloads of it run never gets a
// committed record whose bytes differ from its checksum: every Stored key reads back
// verified, with the metadata's checksum that of the bytes read, and every other key is
// Rejected (CodeInvalidValue: it changed while it was written). The node reads the region in
// place: admission hashes it there, the bucket store hashes its copy and refuses a mismatch;
// a stored value may mix versions of the block, which is the client's doing.
func TestLocalScribble(t *testing.T) {
	seed := testkit.Seed(t)
	n, c := openLocal(t, Local{})
	const block, blocks = 64 << 10, 32
	r, err := c.NewRegion(block * blocks)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the scribbler: whole blocks of one repeated byte, so a mix is visible
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 1))
		mem := r.Bytes()
		for {
			select {
			case <-stop:
				return
			default:
			}
			b := rng.IntN(blocks)
			v := byte(rng.Uint32())
			for i := b * block; i < (b+1)*block; i += 512 {
				clear(mem[i : i+512])
				for j := i; j < i+512; j++ {
					mem[j] = v
				}
			}
		}
	}()
	var stored []string
	rejected := 0
	for round := 0; round < 20 && ctx.Err() == nil; round++ {
		descs := make([]client.Desc, blocks)
		for i := range descs {
			descs[i] = client.Desc{Key: keyOf(fmt.Sprintf("s%d", round), i), Offset: i * block, Length: block}
		}
		res, err := c.OffloadFrom(ctx, kvoffload.NewTxnID(), r, descs)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range res {
			switch {
			case x.Outcome == kvoffload.Stored:
				stored = append(stored, x.Key)
			case x.Outcome == kvoffload.Rejected && x.Code == kvoffload.CodeInvalidValue:
				rejected++
			default:
				t.Errorf("%s: %s (%s) %s, want Stored or Rejected for a rewritten value", x.Key, x.Outcome, x.Code, x.Reason)
			}
		}
	}
	close(stop)
	wg.Wait()
	if len(stored) == 0 {
		t.Fatal("nothing stored")
	}
	checkSums(t, n, stored)
	checkConsistent(t, n)
	t.Logf("%d keys stored and %d rejected while the region was rewritten", len(stored), rejected)
}

// TestLocalCloseMidWrite: regions unregistered, and a client closed, while offloads through
// them run: every key is Stored (its bytes copied before the close), Failed or Conflict, or
// the call fails; every Stored key reads back with its checksum.
func TestLocalCloseMidWrite(t *testing.T) {
	seed := testkit.Seed(t)
	n, _ := openLocal(t, Local{})
	rng := rand.New(rand.NewPCG(seed, 2))
	var mu sync.Mutex
	var stored []string
	counts := map[string]int{}
	for trial := 0; trial < 6; trial++ {
		c := dialLocal(t, n)
		r, err := c.NewRegion(4 << 20)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := 0; w < 3; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					if i == 2000 {
						t.Errorf("trial %d writer %d: 2000 offloads and the closed region or client was never refused", trial, w)
						return
					}
					descs := []client.Desc{{Key: keyOf(fmt.Sprintf("c%d-%d-%d", trial, w, i), 0), Offset: w << 20, Length: 1 << 20}}
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					res, err := c.OffloadFrom(ctx, kvoffload.NewTxnID(), r, descs)
					cancel()
					if err != nil {
						mu.Lock()
						counts["call error"]++
						mu.Unlock()
						return // the region or the client is gone
					}
					mu.Lock()
					counts[res[0].Outcome.String()]++
					mu.Unlock()
					switch res[0].Outcome {
					case kvoffload.Stored:
						mu.Lock()
						stored = append(stored, res[0].Key)
						mu.Unlock()
					case kvoffload.Failed, kvoffload.Conflict:
					default:
						t.Errorf("%s: %s %s", res[0].Key, res[0].Outcome, res[0].Reason)
					}
				}
			}()
		}
		time.Sleep(time.Duration(5+rng.IntN(30)) * time.Millisecond)
		if trial%2 == 0 {
			_ = r.Close()
		} else {
			_ = c.Close()
		}
		wg.Wait()
		_ = c.Close()
	}
	waitSettled(t, n, 10*time.Second)
	checkSums(t, n, stored)
	checkConsistent(t, n)
	t.Logf("outcomes: %v", counts)
	// An unregistered region is unmapped once the calls holding it end (regions.release).
	testkit.Eventually(t, 10*time.Second, "every region unmapped after every client closed", func() bool {
		n.regions.mu.Lock()
		defer n.regions.mu.Unlock()
		return len(n.regions.byID) == 0 && n.regions.mapped == 0 && n.regions.count == 0
	})
	n.regions.mu.Lock()
	left, mapped := len(n.regions.byID), n.regions.mapped
	n.regions.mu.Unlock()
	if left != 0 || mapped != 0 {
		t.Fatalf("%d regions (%d bytes) still mapped after every client closed", left, mapped)
	}
}

// TestLocalLimits: each limit is refused with an error naming it and its value.
func TestLocalLimits(t *testing.T) {
	n, c := openLocal(t, Local{MaxRegionBytes: 2 << 20, MaxRegionsPerConn: 2, MaxRegions: 3, MaxMappedBytes: 5 << 20})
	want := func(err error, text string) {
		t.Helper()
		if !errors.Is(err, kvoffload.ErrTooLarge) || !strings.Contains(err.Error(), text) {
			t.Fatalf("got %v, want ErrTooLarge naming %q", err, text)
		}
	}
	_, err := c.NewRegion(3 << 20)
	want(err, "MaxRegionBytes 2097152")
	r1, err := c.NewRegion(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = c.NewRegion(2 << 20); err != nil {
		t.Fatal(err)
	}
	_, err = c.NewRegion(1 << 20)
	want(err, "MaxRegionsPerConn")
	c2 := dialLocal(t, n)
	_, err = c2.NewRegion(2 << 20)
	want(err, "MaxMappedBytes 5242880")
	if _, err = c2.NewRegion(1 << 20); err != nil {
		t.Fatal(err)
	}
	_, err = c2.NewRegion(1 << 10)
	want(err, "MaxRegions")
	res, err := c.OffloadFrom(context.Background(), kvoffload.NewTxnID(), r1, []client.Desc{{Key: keyOf("in", 0), Length: 10}})
	if err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("%v %+v", err, res)
	}
}

// TestLocalTokens: with API tokens configured, the local socket requires them too.
func TestLocalTokens(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Local.Socket = localSocketPath(t)
	cfg.Security.APITokens = []string{"s3cret"}
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		token string
		ok    bool
	}{{"s3cret", true}, {"wrong", false}} {
		c, err := client.DialOptions(ctx, client.Options{Token: tc.token, InsecureToken: true}, "unix://"+n.LocalSocket())
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: keyOf("tok", 0), Value: []byte("v")}})
		if tc.ok && (err != nil || !res[0].Outcome.OK()) || !tc.ok && !errors.Is(err, kvoffload.ErrDenied) {
			t.Errorf("token %q: %v %+v", tc.token, err, res)
		}
		_ = c.Close()
	}
}

// waitSettled waits, up to timeout, until the bucket store's live bytes are the metadata's:
// a call cancelled by its client's close returns before its transaction settles (the abort,
// and the freeing of the records it wrote, follow on the node's own time), so the invariants
// hold only once the node is quiet.
func waitSettled(t *testing.T, n *Node, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var live int64
		n.FSM().ForEach(func(e fsm.Entry) bool { live += e.Extent.Length; return true })
		if st, err := n.Buckets().Stats(); err == nil && st.LiveBytes == live {
			return
		}
	}
	t.Logf("not settled after %s; the checks below say what is left", timeout)
}
