package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
)

// Dial skips an address nobody listens on and uses the next.
func TestDialSkipsDeadAddress(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), deadAddr(t), n.addr)
	if c.Addr() != n.addr {
		t.Fatalf("client uses %s, want %s", c.Addr(), n.addr)
	}
	if _, err := c.BatchOffload(testCtx(t), kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
}

func TestDialUnreachable(t *testing.T) {
	start := time.Now()
	_, err := client.DialOptions(testCtx(t), testOptions(), deadAddr(t), deadAddr(t))
	if !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("err %v, want ErrUnreachable", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %s", el)
	}
	if _, err := client.Dial(testCtx(t)); !errors.Is(err, client.ErrNoAddress) {
		t.Fatalf("no address: %v", err)
	}
	opt := client.DefaultOptions()
	opt.ChunkSize = 0
	if _, err := client.DialOptions(testCtx(t), opt, "127.0.0.1:1"); err == nil {
		t.Fatal("invalid options accepted")
	}
}

// A member that dies between calls: reads and writes move to the next member.
func TestFailoverBetweenCalls(t *testing.T) {
	f := newFake()
	n1, n2 := mustStartNode(t, f), mustStartNode(t, f)
	c := mustDial(t, testOptions(), n1.addr, n2.addr)
	ctx := testCtx(t)
	if _, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	n1.srv.Stop()
	got, err := c.BatchGet(ctx, []string{"a"})
	if err != nil || string(got[0].Value) != "x" {
		t.Fatalf("%+v %v", got, err)
	}
	if c.Addr() != n2.addr {
		t.Fatalf("client uses %s, want %s", c.Addr(), n2.addr)
	}
	if _, err := c.Stats(ctx); err != nil {
		t.Fatal(err)
	}
}

// With every member gone, a read ends at the caller's deadline.
func TestReadDeadlineAllMembersDown(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	n.srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.BatchGet(ctx, []string{"a"})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kvoffload.ErrIndeterminate) {
		t.Fatalf("err %v, want DeadlineExceeded (and not kvoffload.ErrIndeterminate: a read)", err)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v should carry the last error (kvoffload.Unavailable)", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("returned after %s", el)
	}
}

func TestExistsRemoveStatsStatus(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	ctx := testCtx(t)
	if _, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("12")}, {Key: "b", Value: []byte("345")}}); err != nil {
		t.Fatal(err)
	}
	ex, err := c.BatchExists(ctx, []string{"a", "b", "inflight/c", "d"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []kvoffload.Presence{kvoffload.Present, kvoffload.Present, kvoffload.InFlight, kvoffload.Absent}
	for i, p := range want {
		if ex.Keys[i] != p {
			t.Fatalf("key %d: %s, want %s", i, ex.Keys[i], p)
		}
	}
	if ex.PrefixPresent != 2 {
		t.Fatalf("prefix %d, want 2", ex.PrefixPresent)
	}
	st, err := c.Stats(ctx)
	if err != nil || st.NodeID != "fake" || st.Keys != 2 || st.Bytes != 5 || st.Counters["offload_calls"] != 1 {
		t.Fatalf("%v %v", st, err)
	}
	rm, err := c.Remove(ctx, []string{"a", "zz"})
	if err != nil || len(rm) != 2 || !rm[0].Removed || rm[1].Removed || rm[1].Key != "zz" {
		t.Fatalf("%v %v", rm, err)
	}
	if ex, _ := c.BatchExists(ctx, []string{"a"}, 0); ex.Keys[0] != kvoffload.Absent || ex.PrefixPresent != 0 {
		t.Fatalf("after Remove: %+v", ex)
	}
	s, err := c.Status(ctx)
	if err != nil || s.LeaderID != "n1" || len(s.Members) != 2 || !s.Members[0].Leader {
		t.Fatalf("%v %v", s, err)
	}
}

func TestClosedClient(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchGet(testCtx(t), []string{"a"}); !errors.Is(err, kvoffload.ErrClosed) {
		t.Fatalf("err %v, want kvoffload.ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
