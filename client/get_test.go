package client_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/kvoffload/kvoffload"
	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

type getStream = grpc.ServerStreamingServer[kvoffloadv1.GetChunk]

func sendAll(st getStream, chunks ...*kvoffloadv1.GetChunk) error {
	for _, ch := range chunks {
		if err := st.Send(ch); err != nil {
			return err
		}
	}
	return nil
}

const (
	found    = kvoffloadv1.GetStatus_GET_STATUS_FOUND
	notFound = kvoffloadv1.GetStatus_GET_STATUS_NOT_FOUND
	corrupt  = kvoffloadv1.GetStatus_GET_STATUS_CORRUPT
)

// Values split over many chunks come back byte-exact, per key, in request order.
func TestBatchGetReassembles(t *testing.T) {
	r := testkit.Rand(t)
	f := newFake()
	f.getChunk = 1 + r.IntN(10000)
	t.Logf("get chunk %d", f.getChunk)
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	ctx := testCtx(t)
	var objs []kvoffload.Object
	for i := range 8 {
		objs = append(objs, kvoffload.Object{Key: "k" + string(rune('a'+i)), Value: randBytes(r, r.IntN(100000))})
	}
	if _, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), objs); err != nil {
		t.Fatal(err)
	}
	keys := []string{"missing"}
	for i := len(objs) - 1; i >= 0; i-- {
		keys = append(keys, objs[i].Key)
	}
	got, err := c.BatchGet(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Key != "missing" || got[0].Status != kvoffload.NotFound {
		t.Fatalf("%+v", got[0])
	}
	for i, g := range got[1:] {
		o := objs[len(objs)-1-i]
		if g.Key != o.Key || g.Status != kvoffload.Found || !bytes.Equal(g.Value, o.Value) {
			t.Fatalf("key %s: %s %s, %d bytes (want %d)", g.Key, g.Status, g.Reason, len(g.Value), len(o.Value))
		}
	}
}

// A value whose bytes do not add up to its announced size is Unavailable, never truncated.
func TestBatchGetShortAndLongValues(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	f.setGetHook(func(_ int, _ *kvoffloadv1.GetRequest, st getStream) error {
		return sendAll(st,
			&kvoffloadv1.GetChunk{Index: 0, Status: found, Size: 10, Data: []byte("12345")}, // short, next key follows
			&kvoffloadv1.GetChunk{Index: 1, Status: found, Size: 6, Data: []byte("abc")},
			&kvoffloadv1.GetChunk{Data: []byte("def")}, // data chunk with the index unset
			&kvoffloadv1.GetChunk{Index: 2, Status: corrupt, Reason: "checksum mismatch"},
			&kvoffloadv1.GetChunk{Index: 3, Status: found, Size: 2, Data: []byte("xy")},
			&kvoffloadv1.GetChunk{Index: 3, Data: []byte("z")}, // longer than announced
			&kvoffloadv1.GetChunk{Index: 4, Status: found, Size: 0},
			&kvoffloadv1.GetChunk{Index: 5, Status: found, Size: 4, Data: []byte("123")}, // short at the end of the stream
		)
	})
	got, err := c.BatchGet(testCtx(t), []string{"short", "ok", "bad", "long", "empty", "tail"})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		status kvoffload.GetStatus
		value  string
		reason string
	}{
		{kvoffload.Unavailable, "", "truncated: got 5 of 10"},
		{kvoffload.Found, "abcdef", ""},
		{kvoffload.Corrupt, "", "checksum mismatch"},
		{kvoffload.Unavailable, "", "longer than"},
		{kvoffload.Found, "", ""},
		{kvoffload.Unavailable, "", "got 3 of 4"},
	}
	for i, w := range want {
		g := got[i]
		if g.Status != w.status || string(g.Value) != w.value || !strings.Contains(g.Reason, w.reason) {
			t.Errorf("key %d (%s): %s %q %q, want %s %q reason containing %q", i, g.Key, g.Status, g.Value, g.Reason, w.status, w.value, w.reason)
		}
	}
	if got[4].Value == nil {
		t.Error("an empty kvoffload.Found value should be non-nil")
	}
}

// A stream that ends before every key was answered is retried.
func TestBatchGetStreamEndsEarlyIsRetried(t *testing.T) {
	f := newFake()
	n := mustStartNode(t, f)
	c := mustDial(t, testOptions(), n.addr)
	ctx := testCtx(t)
	if _, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "a", Value: []byte("A")}, {Key: "b", Value: []byte("B")}}); err != nil {
		t.Fatal(err)
	}
	f.setGetHook(func(call int, _ *kvoffloadv1.GetRequest, st getStream) error {
		if call == 1 {
			return st.Send(&kvoffloadv1.GetChunk{Index: 0, Status: found, Size: 1, Data: []byte("A")})
		}
		return errDefault
	})
	got, err := c.BatchGet(ctx, []string{"a", "b"})
	if err != nil || string(got[0].Value) != "A" || string(got[1].Value) != "B" {
		t.Fatalf("%+v %v", got, err)
	}
	if _, gets := f.calls(); gets != 2 {
		t.Fatalf("%d BatchGet calls, want 2", gets)
	}
}

func TestBatchGetProtocolViolations(t *testing.T) {
	cases := map[string][]*kvoffloadv1.GetChunk{
		"index twice":                 {{Index: 0, Status: notFound}, {Index: 0, Status: notFound}},
		"index out of range":          {{Index: 7, Status: notFound}},
		"data first":                  {{Data: []byte("x")}},
		"data for kvoffload.NotFound": {{Index: 0, Status: notFound, Data: []byte("x")}},
		"data for other key":          {{Index: 0, Status: found, Size: 2, Data: []byte("x")}, {Index: 1, Data: []byte("y")}},
	}
	for name, chunks := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFake()
			n := mustStartNode(t, f)
			c := mustDial(t, testOptions(), n.addr)
			f.setGetHook(func(_ int, _ *kvoffloadv1.GetRequest, st getStream) error { return sendAll(st, chunks...) })
			if _, err := c.BatchGet(testCtx(t), []string{"a", "b"}); !errors.Is(err, kvoffload.ErrProtocol) {
				t.Fatalf("err %v, want kvoffload.ErrProtocol", err)
			}
		})
	}
}
