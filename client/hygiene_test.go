package client_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// bad is a key that is not valid UTF-8: the protocol's keys are proto3 strings, which gRPC
// refuses to encode unless they are UTF-8.
const bad = "blk/\xff\xfe"

// A key that is not valid UTF-8 is answered per key at once and never sent; the other keys
// of the request go through, in one call, well before the deadline.
func TestInvalidUTF8KeyAnsweredPerKey(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()

	res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{
		{Key: "ok/1", Value: []byte("1")}, {Key: bad, Value: []byte("x")}, {Key: "ok/2", Value: []byte("2")},
	})
	if err != nil {
		t.Fatalf("BatchOffload: %v", err)
	}
	if res[0].Outcome != kvoffload.Stored || res[2].Outcome != kvoffload.Stored || res[0].Key != "ok/1" || res[2].Key != "ok/2" {
		t.Fatalf("valid keys: %+v", res)
	}
	if res[1].Key != bad || res[1].Outcome != kvoffload.Rejected || res[1].Reason == "" {
		t.Fatalf("invalid key: %+v, want kvoffload.Rejected with a reason", res[1])
	}
	if string(f.val("ok/1")) != "1" || string(f.val("ok/2")) != "2" {
		t.Fatal("the valid keys were not stored")
	}

	only, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: bad, Value: []byte("x")}})
	if err != nil || len(only) != 1 || only[0].Outcome != kvoffload.Rejected {
		t.Fatalf("a batch of only an invalid key: %+v %v", only, err)
	}
	if txns, _, _ := f.snapshot(); len(txns) != 1 {
		t.Fatalf("%d BatchOffload calls, want 1 (nothing to send for the second batch)", len(txns))
	}

	got, err := c.BatchGet(ctx, []string{"ok/1", bad, "ok/2"})
	if err != nil || got[0].Status != kvoffload.Found || got[2].Status != kvoffload.Found || string(got[2].Value) != "2" {
		t.Fatalf("BatchGet: %+v %v", got, err)
	}
	if got[1].Key != bad || got[1].Status != kvoffload.InvalidKey || got[1].Reason == "" {
		t.Fatalf("BatchGet of the invalid key: %+v", got[1])
	}

	ex, err := c.BatchExists(ctx, []string{"ok/1", bad, "ok/2"}, 0)
	if err != nil || !slices.Equal(ex.Keys, []kvoffload.Presence{kvoffload.Present, kvoffload.Absent, kvoffload.Present}) || ex.PrefixPresent != 1 {
		t.Fatalf("BatchExists: %+v %v", ex, err)
	}
	rm, err := c.Remove(ctx, []string{bad, "ok/2"})
	if err != nil || !slices.Equal(rm, []kvoffload.RemoveResult{{Key: bad}, {Key: "ok/2", Removed: true}}) {
		t.Fatalf("Remove: %v %v", rm, err)
	}

	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("took %s", el)
	}
	if slices.Contains(f.seen(), bad) {
		t.Fatal("the invalid key reached the member")
	}
}

// A member that answers Unknown (it could not confirm a key) ends the prefix there, even if
// the member itself counted the key, and its reason reaches the caller.
func TestExistsUnknownEndsPrefix(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	ctx := testCtx(t)
	if _, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("1")}, {Key: "c", Value: []byte("3")}}); err != nil {
		t.Fatal(err)
	}
	ex, err := c.BatchExists(ctx, []string{"a", "unknown/b", "c"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ex.Keys, []kvoffload.Presence{kvoffload.Present, kvoffload.Unknown, kvoffload.Present}) {
		t.Fatalf("presences %v", ex.Keys)
	}
	if ex.PrefixPresent != 1 || ex.Reason != "read index: no leader" {
		t.Fatalf("prefix %d (want 1), reason %q", ex.PrefixPresent, ex.Reason)
	}
}

// A request the member refused is returned at once with its sentinel, after exactly one
// attempt; an unknown outcome (a leader change, a member that cancelled the call) is retried.
func TestRefusalsAreNotRetried(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want error // nil: retried, and the retry succeeds
	}{
		{"invalid argument", status.Error(codes.InvalidArgument, "invalid key"), kvoffload.ErrInvalidArgument},
		{"batch too large", status.Error(codes.ResourceExhausted, "txn: batch too large"), kvoffload.ErrTooLarge},
		{"txn id in use", status.Error(codes.FailedPrecondition, "txn: txn ID in use"), kvoffload.ErrInvalidArgument},
		{"permission denied", status.Error(codes.PermissionDenied, "not allowed"), kvoffload.ErrDenied},
		{"unauthenticated", status.Error(codes.Unauthenticated, "no token"), kvoffload.ErrDenied},
		{"not the leader", status.Error(codes.FailedPrecondition, "raftmeta: not the leader (leader n2)"), nil},
		{"cancelled by the member", status.Error(codes.Canceled, "server shutting down"), nil},
		{"aborted", status.Error(codes.Aborted, "leadership lost"), nil},
		{"internal", status.Error(codes.Internal, "stream broke"), nil},
		{"unknown", status.Error(codes.Unknown, "?"), nil},
		{"server deadline", status.Error(codes.DeadlineExceeded, "commit timeout"), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			n1, n2 := mustStartNode(t, f), mustStartNode(t, f)
			c := mustDial(t, testOptions(), n1.addr, n2.addr)
			f.setOffloadHook(func(_ context.Context, call, _ int, _ string) error {
				if call == 1 {
					return tc.err
				}
				return nil
			})
			f.setGetHook(func(call int, _ *kvoffloadv1.GetRequest, _ getStream) error {
				if call == 1 {
					return tc.err
				}
				return errDefault
			})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("x")}})
			got, gerr := c.BatchGet(ctx, []string{"a"})
			offloads, gets := f.calls()
			if tc.want == nil {
				txns, _, _ := f.snapshot()
				if err != nil || res[0].Outcome != kvoffload.Stored || offloads != 2 || txns[0] != txns[1] {
					t.Fatalf("BatchOffload: %+v %v, %d attempts (want a retry with the same txn ID)", res, err, offloads)
				}
				if gerr != nil || got[0].Status != kvoffload.Found || gets != 2 {
					t.Fatalf("BatchGet: %+v %v, %d attempts (want a retry)", got, gerr, gets)
				}
				return
			}
			if !errors.Is(err, tc.want) || status.Code(err) != status.Code(tc.err) || errors.Is(err, kvoffload.ErrIndeterminate) || offloads != 1 {
				t.Fatalf("BatchOffload: err %v (want %v wrapping %s), %d attempts (want 1)", err, tc.want, status.Code(tc.err), offloads)
			}
			if !errors.Is(gerr, tc.want) || status.Code(gerr) != status.Code(tc.err) || gets != 1 {
				t.Fatalf("BatchGet: err %v (want %v wrapping %s), %d attempts (want 1)", gerr, tc.want, status.Code(tc.err), gets)
			}
		})
	}
}
