package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
)

// TestErrorContract: with every member gone, each call returns within its CallTimeout (the
// context has no deadline) with the sentinel its godoc names, wrapping the deadline too:
// ErrIndeterminate for an offload (it may have been stored), ErrUnavailable for the others;
// and the OnAttempt hook saw the failed attempts.
func TestErrorContract(t *testing.T) {
	m := mustStartNode(t, newFake())
	opt := testOptions()
	opt.CallTimeout = 300 * time.Millisecond
	attempts := map[string]int{}
	opt.OnAttempt = func(a client.Attempt) {
		if a.Err != nil {
			attempts[a.Op]++ // the calls below run one at a time
		}
	}
	c := mustDial(t, opt, m.addr)
	m.srv.Stop()

	ctx := context.Background() // no deadline: CallTimeout bounds each call
	calls := []struct {
		op   string
		want error
		call func() error
	}{
		{"BatchOffload", kvoffload.ErrIndeterminate, func() error {
			_, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "k", Value: []byte("v")}})
			return err
		}},
		{"BatchGet", kvoffload.ErrUnavailable, func() error { _, err := c.BatchGet(ctx, []string{"k"}); return err }},
		{"BatchGet", kvoffload.ErrUnavailable, func() error {
			_, err := c.BatchGetInto(ctx, []string{"k"}, [][]byte{make([]byte, 4)})
			return err
		}},
		{"BatchExists", kvoffload.ErrUnavailable, func() error { _, err := c.BatchExists(ctx, []string{"k"}, 0); return err }},
		{"Remove", kvoffload.ErrUnavailable, func() error { _, err := c.Remove(ctx, []string{"k"}); return err }},
		{"Stats", kvoffload.ErrUnavailable, func() error { _, err := c.Stats(ctx); return err }},
		{"Status", kvoffload.ErrUnavailable, func() error { _, err := c.Status(ctx); return err }},
	}
	for _, tc := range calls {
		start := time.Now()
		err := tc.call()
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("%s took %s with CallTimeout 300ms", tc.op, el)
		}
		if !errors.Is(err, tc.want) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want %v wrapping context.DeadlineExceeded", tc.op, err, tc.want)
		}
		if errors.Is(err, kvoffload.ErrIndeterminate) && tc.op != "BatchOffload" {
			t.Errorf("%s: %v claims an unknown outcome", tc.op, err)
		}
		if attempts[tc.op] == 0 {
			t.Errorf("%s: OnAttempt saw no failed attempt", tc.op)
		}
	}

	if _, err := c.BatchGetInto(ctx, []string{"a", "b"}, [][]byte{nil}); !errors.Is(err, kvoffload.ErrInvalidArgument) {
		t.Errorf("BatchGetInto with one buffer for two keys: %v, want ErrInvalidArgument", err)
	}
	c.Close()
	if _, err := c.BatchGet(ctx, []string{"k"}); !errors.Is(err, kvoffload.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
