package client_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// freezer is a TCP relay in front of one member that can be frozen: it then stops moving
// bytes in both directions and closes nothing, as the kernel keeps the connections of a
// process stopped by SIGSTOP (or in a long GC pause) open while nothing answers on them.
type freezer struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	thawed chan struct{} // closed while bytes move
	conns  []net.Conn
	done   chan struct{} // closed by stop
	wg     sync.WaitGroup
}

// mustFreezer relays a fresh 127.0.0.1 port to target until the test ends.
func mustFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fz := &freezer{ln: ln, target: target, thawed: make(chan struct{}), done: make(chan struct{})}
	close(fz.thawed)
	fz.wg.Add(1)
	go fz.serve()
	t.Cleanup(fz.stop)
	return fz
}

func (fz *freezer) addr() string { return fz.ln.Addr().String() }

// freeze stops every byte on every connection, open or future, until stop.
func (fz *freezer) freeze() {
	fz.mu.Lock()
	defer fz.mu.Unlock()
	select {
	case <-fz.thawed:
		fz.thawed = make(chan struct{})
	default:
	}
}

// gate blocks while the relay is frozen; false once it is stopped.
func (fz *freezer) gate() bool {
	fz.mu.Lock()
	th := fz.thawed
	fz.mu.Unlock()
	select {
	case <-th:
		return true
	case <-fz.done:
		return false
	}
}

func (fz *freezer) serve() {
	defer fz.wg.Done()
	for {
		in, err := fz.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", fz.target)
		if err != nil {
			in.Close()
			continue
		}
		fz.mu.Lock()
		fz.conns = append(fz.conns, in, out)
		fz.mu.Unlock()
		fz.wg.Add(2)
		go fz.relay(out, in)
		go fz.relay(in, out)
	}
}

// relay copies src to dst, holding every read back at the gate; it closes both at the end.
func (fz *freezer) relay(dst, src net.Conn) {
	defer fz.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 16<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !fz.gate() {
			return
		}
		if _, werr := dst.Write(buf[:n]); werr != nil {
			return
		}
		if err != nil {
			return
		}
	}
}

func (fz *freezer) stop() {
	close(fz.done)
	fz.ln.Close()
	fz.mu.Lock()
	for _, c := range fz.conns {
		c.Close()
	}
	fz.mu.Unlock()
	fz.wg.Wait()
}

// A member that stalls in the middle of a BatchOffload (its connection stays open, nothing
// moves) is left after StallTimeout (the default, 2 s): the batch completes on the next
// member with the same txn ID, well before the caller's deadline.
func TestOffloadFailsOverFromStalledMember(t *testing.T) {
	r := testkit.Rand(t)
	f := newFake()
	n1, n2 := mustStartNode(t, f), mustStartNode(t, f)
	fz := mustFreezer(t, n1.addr)
	opt := testOptions()
	opt.ChunkSize = 64 << 10
	if opt.StallTimeout != 2*time.Second {
		t.Fatalf("default StallTimeout %s, want 2s", opt.StallTimeout)
	}
	c := mustDial(t, opt, fz.addr(), n2.addr)
	f.setOffloadHook(func(_ context.Context, call, msgs int, _ string) error {
		if call == 1 && msgs == 2 {
			fz.freeze() // member 1 has the txn ID and part of the value, then nothing more
		}
		return nil
	})
	val := randBytes(r, 2<<20)
	id := kvoffload.NewTxnID()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	res, err := c.BatchOffload(ctx, id, []kvoffload.Object{{Key: "k", Value: val}})
	el := time.Since(start)
	t.Logf("completed after %s", el)
	if err != nil {
		t.Fatalf("after %s: %v", el, err)
	}
	if el > 3*time.Second {
		t.Fatalf("the batch took %s, want < 3s (StallTimeout 2s, then the next member)", el)
	}
	checkRetriedOn(t, f, c, res, id, val, n2.addr)
}

// A read on a connection to a member that is already stalled moves to the next member.
func TestGetFailsOverFromStalledMember(t *testing.T) {
	f := newFake()
	n1, n2 := mustStartNode(t, f), mustStartNode(t, f)
	fz := mustFreezer(t, n1.addr)
	opt := testOptions()
	opt.StallTimeout = 500 * time.Millisecond
	c := mustDial(t, opt, fz.addr(), n2.addr)
	ctx := testCtx(t)
	if _, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("A")}}); err != nil {
		t.Fatal(err)
	}
	fz.freeze()
	start := time.Now()
	got, err := c.BatchGet(ctx, []string{"a"})
	el := time.Since(start)
	if err != nil || got[0].Status != kvoffload.Found || string(got[0].Value) != "A" {
		t.Fatalf("after %s: %+v %v", el, got, err)
	}
	if el > 1500*time.Millisecond {
		t.Fatalf("the read took %s with StallTimeout 500ms", el)
	}
	if _, gets := f.calls(); gets != 1 {
		t.Fatalf("%d BatchGet calls reached a member, want 1 (the stalled one never got the request)", gets)
	}
}

// A live member that is slow is not a stalled one: it answers the client's probes, so an
// attempt that waits 5×StallTimeout for its reply, or sends into a member that reads slowly,
// is not cut off (the total time of an attempt is not bounded).
func TestStallWatchSparesLiveMember(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pause func(msgs int) time.Duration // how long the member sits on message msgs
	}{
		{"slow reply", func(msgs int) time.Duration {
			if msgs == 32 { // the last message: the member "commits" for 1.5 s
				return 1500 * time.Millisecond
			}
			return 0
		}},
		{"slow reader", func(int) time.Duration { return 50 * time.Millisecond }}, // 32 × 50 ms
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testkit.Rand(t)
			f := newFake()
			n := mustStartNode(t, f)
			opt := testOptions()
			opt.ChunkSize = 64 << 10
			opt.StallTimeout = 300 * time.Millisecond
			c := mustDial(t, opt, n.addr)
			f.setOffloadHook(func(ctx context.Context, call, msgs int, _ string) error {
				if call == 1 {
					select {
					case <-time.After(tc.pause(msgs)):
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			})
			val := randBytes(r, 2<<20) // 32 messages of 64 KiB
			start := time.Now()
			res, err := c.BatchOffload(testCtx(t), kvoffload.NewTxnID(), []kvoffload.Object{{Key: "k", Value: val}})
			t.Logf("took %s", time.Since(start))
			if err != nil || res[0].Outcome != kvoffload.Stored || !bytes.Equal(f.val("k"), val) {
				t.Fatalf("%+v %v", res, err)
			}
			if txns, _, _ := f.snapshot(); len(txns) != 1 {
				t.Fatalf("%d attempts, want 1: the stall watch cut off a live member", len(txns))
			}
			if el := time.Since(start); el < time.Second {
				t.Fatalf("took %s: the member's pauses did not happen", el)
			}
		})
	}
}
