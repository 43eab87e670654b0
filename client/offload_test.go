package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// A 5 MiB value travels in chunks of at most ChunkSize, the txn ID only in the first message,
// and arrives byte-exact; BatchGet reassembles it byte-exact from 64 KiB chunks.
func TestOffloadChunks5MiB(t *testing.T) {
	r := testkit.Rand(t)
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	ctx := testCtx(t)
	val := randBytes(r, 5<<20)
	res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "big", Value: val}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome != kvoffload.Stored || res[0].Key != "big" {
		t.Fatalf("results %+v", res)
	}
	_, sizes, idMsgs := f.snapshot()
	if len(sizes) != 5 || idMsgs != 1 {
		t.Fatalf("%d messages (want 5), %d with a txn id (want 1)", len(sizes), idMsgs)
	}
	for i, s := range sizes {
		if s > 1<<20 {
			t.Fatalf("message %d holds %d bytes > ChunkSize", i, s)
		}
	}
	if !bytes.Equal(f.val("big"), val) {
		t.Fatal("the fake stored different bytes")
	}
	got, err := c.BatchGet(ctx, []string{"big"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Status != kvoffload.Found || !bytes.Equal(got[0].Value, val) {
		t.Fatalf("BatchGet: %s %s, %d bytes", got[0].Status, got[0].Reason, len(got[0].Value))
	}
}

// Random multi-object batches (including empty values) are framed key by key, stored exactly,
// and a repeated txn ID returns the original results.
func TestOffloadMultiObjectBatches(t *testing.T) {
	r := testkit.Rand(t)
	f := newFake()
	n := mustStartNode(t, f)
	opt := testOptions()
	opt.ChunkSize = 1 + r.IntN(64<<10)
	t.Logf("chunk size %d", opt.ChunkSize)
	c := mustDial(t, opt, n.addr)
	ctx := testCtx(t)
	for batch := range 5 {
		objs := make([]kvoffload.Object, r.IntN(20))
		wantMsgs := 0
		for i := range objs {
			size := r.IntN(3 * opt.ChunkSize)
			if r.IntN(5) == 0 {
				size = 0
			}
			objs[i] = kvoffload.Object{Key: fmt.Sprintf("b%d/k%d", batch, i), Value: randBytes(r, size)}
			wantMsgs += max(1, (size+opt.ChunkSize-1)/opt.ChunkSize)
		}
		wantMsgs = max(wantMsgs, 1)
		_, before, _ := f.snapshot()
		id := kvoffload.NewTxnID()
		res, err := c.BatchOffload(ctx, id, objs)
		if err != nil {
			t.Fatal(err)
		}
		_, after, _ := f.snapshot()
		if got := len(after) - len(before); got != wantMsgs {
			t.Fatalf("batch %d: %d messages, want %d", batch, got, wantMsgs)
		}
		for _, s := range after[len(before):] {
			if s > opt.ChunkSize {
				t.Fatalf("a message holds %d bytes > ChunkSize %d", s, opt.ChunkSize)
			}
		}
		for i, o := range objs {
			if res[i].Key != o.Key || res[i].Outcome != kvoffload.Stored || !bytes.Equal(f.val(o.Key), o.Value) {
				t.Fatalf("batch %d object %d: %+v", batch, i, res[i])
			}
		}
		again, err := c.BatchOffload(ctx, id, objs)
		if err != nil || len(again) != len(objs) {
			t.Fatalf("same txn again: %v, %d results", err, len(again))
		}
		for i := range again {
			if again[i].Outcome != kvoffload.Stored {
				t.Fatalf("same txn again: object %d %s, want the original kvoffload.Stored", i, again[i].Outcome)
			}
		}
	}
}

func TestOffloadOutcomes(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	ctx := testCtx(t)
	if _, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("1")}, {Key: "a2", Value: nil}})
	if err != nil || res[0].Outcome != kvoffload.AlreadyStored || res[1].Outcome != kvoffload.Stored {
		t.Fatalf("%+v %v", res, err)
	}
	res, err = c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("2")}})
	if err != nil || res[0].Outcome != kvoffload.Conflict || res[0].Outcome.OK() || res[0].Reason == "" {
		t.Fatalf("%+v %v", res, err)
	}
	res, err = c.BatchOffload(ctx, kvoffload.NewTxnID(), nil)
	if err != nil || len(res) != 0 {
		t.Fatalf("empty batch: %+v %v", res, err)
	}
	if txns, _, _ := f.snapshot(); len(txns) != 4 {
		t.Fatalf("%d calls reached the fake, want 4 (the empty batch names its txn too)", len(txns))
	}
	// An empty key is per key, as on every Store: Rejected with CodeInvalidKey, not sent.
	res, err = c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: ""}, {Key: "b", Value: []byte("1")}})
	if err != nil || res[0].Outcome != kvoffload.Rejected || !errors.Is(res[0].Err(), kvoffload.CodeInvalidKey) || res[1].Outcome != kvoffload.Stored {
		t.Fatalf("empty key: %+v %v", res, err)
	}
	if _, err := c.BatchOffload(ctx, kvoffload.TxnID{}, []kvoffload.Object{{Key: "c", Value: []byte("1")}}); !errors.Is(err, kvoffload.ErrInvalidArgument) {
		t.Fatalf("zero txn ID: %v, want kvoffload.ErrInvalidArgument", err)
	}
}

// A connection cut mid-stream is retried on the next member with the same txn ID, and the
// batch is stored once.
func TestOffloadRetryAfterDisconnectKeepsTxnID(t *testing.T) {
	r := testkit.Rand(t)
	f := newFake()
	n1, n2 := mustStartNode(t, f), mustStartNode(t, f)
	opt := testOptions()
	opt.ChunkSize = 64 << 10
	c := mustDial(t, opt, n1.addr, n2.addr)
	f.setOffloadHook(func(ctx context.Context, call, msgs int, _ string) error {
		if call == 1 && msgs == 3 {
			// Cut every connection of member 1 mid-stream, and hold call 1 until the cut has
			// cancelled it, so it cannot finish first.
			go n1.srv.Stop()
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	val := randBytes(r, 2<<20)
	id := kvoffload.NewTxnID()
	res, err := c.BatchOffload(testCtx(t), id, []kvoffload.Object{{Key: "k", Value: val}})
	if err != nil {
		t.Fatal(err)
	}
	checkRetriedOn(t, f, c, res, id, val, n2.addr)
}

// When the retried txn comes back aborted (the cluster rolled the cut-off attempt back), the
// client resends once with a new txn ID.
func TestOffloadAbortedRetryGetsNewTxnID(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	f.setOffloadHook(func(_ context.Context, call, msgs int, id string) error {
		if call == 1 && msgs == 1 {
			f.abort(id, 2)
			return status.Error(codes.Unavailable, "leader lost")
		}
		return nil
	})
	id := kvoffload.NewTxnID()
	res, err := c.BatchOffload(testCtx(t), id, []kvoffload.Object{{Key: "a", Value: []byte("x")}, {Key: "b", Value: []byte("y")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Outcome != kvoffload.Stored {
			t.Fatalf("%+v", res)
		}
	}
	txns, _, _ := f.snapshot()
	if len(txns) != 3 || txns[0] != string(id[:]) || txns[1] != string(id[:]) || txns[2] == string(id[:]) {
		t.Fatalf("txn IDs %x: want the original twice, then a new one", txns)
	}
}

// An aborted result on the first attempt is the caller's answer: no retry.
func TestOffloadAbortedFirstAttemptIsReturned(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	id := kvoffload.NewTxnID()
	f.abort(string(id[:]), 1)
	res, err := c.BatchOffload(testCtx(t), id, []kvoffload.Object{{Key: "a", Value: []byte("x")}})
	if err != nil || res[0].Outcome != kvoffload.Failed || res[0].Reason != "transaction aborted" {
		t.Fatalf("%+v %v", res, err)
	}
	if txns, _, _ := f.snapshot(); len(txns) != 1 {
		t.Fatalf("%d calls, want 1", len(txns))
	}
}

// The caller's deadline ends a call whose member never answers; the error says the outcome is
// unknown.
func TestOffloadDeadlineHonoured(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	f.setOffloadHook(func(ctx context.Context, _, _ int, _ string) error {
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("x")}})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, kvoffload.ErrIndeterminate) {
		t.Fatalf("err %v, want DeadlineExceeded and kvoffload.ErrIndeterminate", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("returned after %s", el)
	}
}

// Unknown outcomes are retried until the context ends, or MaxAttempts.
func TestOffloadMaxAttempts(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	opt := testOptions()
	opt.MaxAttempts = 3
	c := mustDial(t, opt, n.addr)
	f.setOffloadHook(func(context.Context, int, int, string) error { return status.Error(codes.Unavailable, "down") })
	_, err := c.BatchOffload(testCtx(t), kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("x")}})
	if !errors.Is(err, kvoffload.ErrIndeterminate) || status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v", err)
	}
	if txns, _, _ := f.snapshot(); len(txns) != 3 {
		t.Fatalf("%d attempts, want 3", len(txns))
	}
}

func TestTxnBeginPutCommitAbort(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	ctx := testCtx(t)

	tx := c.Begin()
	for _, k := range []string{"t1", "t2"} {
		if err := tx.Put(k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := tx.Commit(ctx)
	if err != nil || len(res) != 2 || res[1].Key != "t2" || res[1].Outcome != kvoffload.Stored {
		t.Fatalf("%+v %v", res, err)
	}
	id := tx.ID()
	if txns, _, _ := f.snapshot(); len(txns) != 1 || txns[0] != string(id[:]) {
		t.Fatalf("txn IDs %x, want %x", txns, id)
	}
	if err := tx.Put("t3", nil); !errors.Is(err, client.ErrTxnDone) {
		t.Fatalf("Put after Commit: %v", err)
	}
	if _, err := tx.Commit(ctx); !errors.Is(err, client.ErrTxnDone) {
		t.Fatalf("Commit after Commit: %v", err)
	}

	ab := c.Begin()
	_ = ab.Put("never", []byte("x"))
	ab.Abort()
	if err := ab.Put("x", nil); !errors.Is(err, client.ErrTxnDone) {
		t.Fatalf("Put after Abort: %v", err)
	}
	if _, err := ab.Commit(ctx); !errors.Is(err, client.ErrTxnDone) {
		t.Fatalf("Commit after Abort: %v", err)
	}
	if txns, _, _ := f.snapshot(); len(txns) != 1 {
		t.Fatal("Abort sent something")
	}
	if _, ok := f.value("never"); ok {
		t.Fatal("an aborted Put was stored")
	}
}

// A Commit that failed with an unknown outcome may be called again, with the same ID.
func TestTxnCommitAgainAfterIndeterminate(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	f.setOffloadHook(func(context.Context, int, int, string) error { return status.Error(codes.Unavailable, "down") })
	tx := c.Begin()
	_ = tx.Put("k", []byte("v"))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := tx.Commit(ctx); !errors.Is(err, kvoffload.ErrIndeterminate) {
		t.Fatalf("err %v", err)
	}
	if err := tx.Put("k2", nil); !errors.Is(err, client.ErrTxnDone) {
		t.Fatalf("Put after a failed Commit: %v", err)
	}
	f.setOffloadHook(nil)
	res, err := tx.Commit(testCtx(t))
	if err != nil || res[0].Outcome != kvoffload.Stored {
		t.Fatalf("%+v %v", res, err)
	}
	id := tx.ID()
	txns, _, _ := f.snapshot()
	for _, x := range txns {
		if x != string(id[:]) {
			t.Fatalf("txn IDs %x, want only %x", txns, id)
		}
	}
}
