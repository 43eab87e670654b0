// Package storetest is the conformance suite of kvoffload.Store: the behaviour every
// implementation (the embedded node, the remote client against a storenode, the fake) must
// share, asserted with the same tests. Run it from a test of the implementation:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) kvoffload.Store { return fake.New(fake.Options{}) })
//	}
//
// open is called once per test and must return a store with the default limits (MaxKeyBytes
// 1024, MaxBatchKeys 4096); it may return the same store every time (each test names its own
// keys) and may register cleanup with t.Cleanup.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
)

// Run runs every conformance test as a subtest of t.
func Run(t *testing.T, open func(t *testing.T) kvoffload.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s kvoffload.Store)
	}{
		{"OffloadThenGet", offloadThenGet},
		{"PerKeyValidation", perKeyValidation},
		{"DuplicatesInBatch", duplicatesInBatch},
		{"RetrySameTxnID", retrySameTxnID},
		{"ZeroTxnIDRefused", zeroTxnID},
		{"Exists", exists},
		{"Remove", remove},
		{"GetInto", getInto},
		{"BatchKeysLimit", batchKeysLimit},
		{"SingleFlight", singleFlight},
		{"Stats", stats},
		{"EndedContext", endedContext},
		{"CallerOwnsValues", callerOwnsValues},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// prefix is the key prefix of one test: the tests may share one store, so each names its own
// keys.
func prefix(t *testing.T) string { return "storetest/" + t.Name() + "/" }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func offload(t *testing.T, s kvoffload.Store, objs ...kvoffload.Object) []kvoffload.KeyResult {
	t.Helper()
	res, err := s.BatchOffload(ctx(t), kvoffload.NewTxnID(), objs)
	if err != nil {
		t.Fatalf("BatchOffload: %v", err)
	}
	if len(res) != len(objs) {
		t.Fatalf("BatchOffload: %d results for %d objects", len(res), len(objs))
	}
	for i, r := range res {
		if r.Key != objs[i].Key {
			t.Fatalf("result %d is for key %q, want %q", i, r.Key, objs[i].Key)
		}
	}
	return res
}

func obj(key, value string) kvoffload.Object { return kvoffload.Object{Key: key, Value: []byte(value)} }

func want(t *testing.T, r kvoffload.KeyResult, o kvoffload.Outcome, c kvoffload.Code) {
	t.Helper()
	if r.Outcome != o || r.Code != c {
		t.Fatalf("key %q: %s (%s) %q, want %s (%s)", r.Key, r.Outcome, r.Code, r.Reason, o, c)
	}
	if (r.Err() == nil) != o.OK() || (r.Err() != nil && !errors.Is(r.Err(), c)) {
		t.Fatalf("key %q: Err() = %v, want one matching %s", r.Key, r.Err(), c)
	}
	if !o.OK() && r.Reason == "" {
		t.Fatalf("key %q: %s without a Reason", r.Key, o)
	}
}

func get(t *testing.T, s kvoffload.Store, keys ...string) []kvoffload.GetResult {
	t.Helper()
	res, err := s.BatchGet(ctx(t), keys)
	if err != nil {
		t.Fatalf("BatchGet: %v", err)
	}
	if len(res) != len(keys) {
		t.Fatalf("BatchGet: %d results for %d keys", len(res), len(keys))
	}
	return res
}

func wantFound(t *testing.T, r kvoffload.GetResult, value string) {
	t.Helper()
	if r.Status != kvoffload.Found || string(r.Value) != value || r.Size != len(value) || r.Err() != nil {
		t.Fatalf("key %q: %s (%s) %q size %d, want Found %q", r.Key, r.Status, r.Code, r.Value, r.Size, value)
	}
}

func offloadThenGet(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	res := offload(t, s, obj(p+"a", "alpha"), obj(p+"b", "beta"))
	want(t, res[0], kvoffload.Stored, kvoffload.CodeNone)
	want(t, res[1], kvoffload.Stored, kvoffload.CodeNone)
	res = offload(t, s, obj(p+"a", "alpha"), obj(p+"b", "BETA"))
	want(t, res[0], kvoffload.AlreadyStored, kvoffload.CodeNone)
	want(t, res[1], kvoffload.Conflict, kvoffload.CodeMismatch)
	got := get(t, s, p+"a", p+"missing", p+"b")
	wantFound(t, got[0], "alpha")
	wantFound(t, got[2], "beta") // the Conflict changed nothing
	if r := got[1]; r.Status != kvoffload.NotFound || r.Code != kvoffload.CodeNotFound || !errors.Is(r.Err(), kvoffload.CodeNotFound) {
		t.Fatalf("missing key: %+v", r)
	}
	// Each value is the caller's own.
	got[0].Value[0] = 'X'
	wantFound(t, get(t, s, p+"a")[0], "alpha")
}

func perKeyValidation(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	long := strings.Repeat("k", 1025)
	res := offload(t, s, obj("", "v"), obj("ctl\x01", "v"), obj("bad\xff", "v"), obj(long, "v"), obj(p+"empty", ""), obj(p+"ok", "v"))
	for _, r := range res[:4] {
		want(t, r, kvoffload.Rejected, kvoffload.CodeInvalidKey)
	}
	want(t, res[4], kvoffload.Rejected, kvoffload.CodeInvalidValue)
	want(t, res[5], kvoffload.Stored, kvoffload.CodeNone)
	got := get(t, s, "", "ctl\x01", p+"ok")
	for _, r := range got[:2] {
		if r.Status != kvoffload.InvalidKey || !errors.Is(r.Err(), kvoffload.CodeInvalidKey) {
			t.Fatalf("BatchGet of invalid key %q: %+v", r.Key, r)
		}
	}
	wantFound(t, got[2], "v")
	ex, err := s.BatchExists(ctx(t), []string{"", p + "ok"}, 0)
	if err != nil || len(ex.Keys) != 2 || ex.Keys[0] != kvoffload.Absent || ex.Keys[1] != kvoffload.Present || ex.PrefixPresent != 0 {
		t.Fatalf("BatchExists with an invalid key: %+v %v", ex, err)
	}
	rm, err := s.Remove(ctx(t), []string{"", "ctl\x01"})
	if err != nil || len(rm) != 2 || rm[0].Removed || rm[1].Removed {
		t.Fatalf("Remove of invalid keys: %+v %v", rm, err)
	}
	// A batch of invalid keys only is answered per key too, one result per key.
	all := []string{"", "ctl\x01"}
	g, err := s.BatchGet(ctx(t), all)
	if err != nil || len(g) != 2 || g[0].Status != kvoffload.InvalidKey || g[1].Status != kvoffload.InvalidKey {
		t.Fatalf("BatchGet of invalid keys only: %+v %v", g, err)
	}
	g, err = s.BatchGetInto(ctx(t), all, [][]byte{make([]byte, 8), make([]byte, 8)})
	if err != nil || len(g) != 2 || g[0].Status != kvoffload.InvalidKey || g[1].Status != kvoffload.InvalidKey {
		t.Fatalf("BatchGetInto of invalid keys only: %+v %v", g, err)
	}
	ex, err = s.BatchExists(ctx(t), all, 0)
	if err != nil || len(ex.Keys) != 2 || ex.Keys[0] != kvoffload.Absent || ex.Keys[1] != kvoffload.Absent {
		t.Fatalf("BatchExists of invalid keys only: %+v %v", ex, err)
	}
	for _, r := range offload(t, s, obj("", "v"), obj("ctl\x01", "v")) {
		want(t, r, kvoffload.Rejected, kvoffload.CodeInvalidKey)
	}
}

func duplicatesInBatch(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	res := offload(t, s, obj(p+"d", "same"), obj(p+"d", "same"), obj(p+"e", "one"), obj(p+"e", "two"))
	want(t, res[0], kvoffload.Stored, kvoffload.CodeNone)
	want(t, res[1], kvoffload.AlreadyStored, kvoffload.CodeNone)
	want(t, res[2], kvoffload.Stored, kvoffload.CodeNone)
	want(t, res[3], kvoffload.Conflict, kvoffload.CodeDuplicateKey)
	wantFound(t, get(t, s, p+"e")[0], "one")
}

func retrySameTxnID(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	id := kvoffload.NewTxnID()
	batch := []kvoffload.Object{obj(p+"r1", "x"), obj(p+"r2", "y")}
	first, err := s.BatchOffload(ctx(t), id, batch)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.BatchOffload(ctx(t), id, batch)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	for i := range first {
		want(t, first[i], kvoffload.Stored, kvoffload.CodeNone)
		if again[i].Outcome != kvoffload.Stored {
			t.Fatalf("retry with the same txn ID: %+v, want the original Stored", again[i])
		}
	}
	_, err = s.BatchOffload(ctx(t), id, []kvoffload.Object{obj(p+"r3", "z")})
	if !errors.Is(err, kvoffload.ErrInvalidArgument) {
		t.Fatalf("txn ID reused for another batch: %v, want ErrInvalidArgument", err)
	}
	if r := get(t, s, p+"r3")[0]; r.Status != kvoffload.NotFound {
		t.Fatalf("the refused batch stored %q: %+v", r.Key, r)
	}
}

func zeroTxnID(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	_, err := s.BatchOffload(ctx(t), kvoffload.TxnID{}, []kvoffload.Object{obj(p+"z", "v")})
	if !errors.Is(err, kvoffload.ErrInvalidArgument) {
		t.Fatalf("zero txn ID: %v, want ErrInvalidArgument", err)
	}
	if r := get(t, s, p+"z")[0]; r.Status != kvoffload.NotFound {
		t.Fatalf("a zero txn ID stored the key: %+v", r)
	}
}

func exists(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	offload(t, s, obj(p+"p0", "a"), obj(p+"p1", "b"), obj(p+"p3", "d"))
	for _, lease := range []time.Duration{0, time.Minute} {
		ex, err := s.BatchExists(ctx(t), []string{p + "p0", p + "p1", p + "p2", p + "p3"}, lease)
		if err != nil {
			t.Fatalf("lease %s: %v", lease, err)
		}
		wantKeys := []kvoffload.Presence{kvoffload.Present, kvoffload.Present, kvoffload.Absent, kvoffload.Present}
		if fmt.Sprint(ex.Keys) != fmt.Sprint(wantKeys) || ex.PrefixPresent != 2 {
			t.Fatalf("lease %s: %+v, want %v with prefix 2", lease, ex, wantKeys)
		}
	}
	if ex, err := s.BatchExists(ctx(t), nil, 0); err != nil || len(ex.Keys) != 0 || ex.PrefixPresent != 0 {
		t.Fatalf("no keys: %+v %v", ex, err)
	}
}

func remove(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	offload(t, s, obj(p+"x", "1"), obj(p+"y", "2"))
	rm, err := s.Remove(ctx(t), []string{p + "x", p + "never"})
	if err != nil || len(rm) != 2 || !rm[0].Removed || rm[0].Key != p+"x" || rm[1].Removed || rm[1].Key != p+"never" {
		t.Fatalf("Remove: %+v %v", rm, err)
	}
	if rm, err := s.Remove(ctx(t), []string{p + "x"}); err != nil || rm[0].Removed {
		t.Fatalf("second Remove: %+v %v", rm, err)
	}
	got := get(t, s, p+"x", p+"y")
	if got[0].Status != kvoffload.NotFound {
		t.Fatalf("removed key: %+v", got[0])
	}
	wantFound(t, got[1], "2")
	want(t, offload(t, s, obj(p+"x", "new"))[0], kvoffload.Stored, kvoffload.CodeNone)
	wantFound(t, get(t, s, p+"x")[0], "new")
}

func getInto(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	offload(t, s, obj(p+"g1", "hello"), obj(p+"g2", "world!"))
	bufs := [][]byte{make([]byte, 8), []byte("xyz"), make([]byte, 4)}
	res, err := s.BatchGetInto(ctx(t), []string{p + "g1", p + "g2", p + "g3"}, bufs)
	if err != nil || len(res) != 3 {
		t.Fatalf("BatchGetInto: %+v %v", res, err)
	}
	wantFound(t, res[0], "hello")
	if &res[0].Value[0] != &bufs[0][0] {
		t.Fatal("BatchGetInto: the value is not in the caller's buffer")
	}
	if r := res[1]; r.Status != kvoffload.ShortBuffer || r.Size != 6 || !errors.Is(r.Err(), kvoffload.CodeShortBuffer) || string(bufs[1]) != "xyz" {
		t.Fatalf("short buffer: %+v, buffer %q", r, bufs[1])
	}
	if res[2].Status != kvoffload.NotFound {
		t.Fatalf("missing key: %+v", res[2])
	}
	if _, err := s.BatchGetInto(ctx(t), []string{p + "g1"}, nil); !errors.Is(err, kvoffload.ErrInvalidArgument) {
		t.Fatalf("buffer count mismatch: %v, want ErrInvalidArgument", err)
	}
}

func batchKeysLimit(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	keys := make([]string, 4097)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sk%d", p, i)
	}
	if _, err := s.BatchGet(ctx(t), keys); !errors.Is(err, kvoffload.ErrTooLarge) || !strings.Contains(err.Error(), "4096") {
		t.Fatalf("BatchGet of 4097 keys: %v, want ErrTooLarge naming MaxBatchKeys 4096", err)
	}
	objs := make([]kvoffload.Object, len(keys))
	for i, k := range keys {
		objs[i] = obj(k, "v")
	}
	if _, err := s.BatchOffload(ctx(t), kvoffload.NewTxnID(), objs); !errors.Is(err, kvoffload.ErrTooLarge) {
		t.Fatalf("BatchOffload of 4097 objects: %v, want ErrTooLarge", err)
	}
	if r := get(t, s, keys[0])[0]; r.Status != kvoffload.NotFound {
		t.Fatalf("the refused batch stored k0: %+v", r)
	}
	// MaxBatchKeys counts every key named, the invalid ones too.
	keys[7] = ""
	objs[7] = obj("", "v")
	if _, err := s.BatchOffload(ctx(t), kvoffload.NewTxnID(), objs); !errors.Is(err, kvoffload.ErrTooLarge) {
		t.Errorf("BatchOffload of 4097 objects, one invalid: %v, want ErrTooLarge", err)
	}
	if _, err := s.BatchGet(ctx(t), keys); !errors.Is(err, kvoffload.ErrTooLarge) {
		t.Errorf("BatchGet of 4097 keys, one invalid: %v, want ErrTooLarge", err)
	}
	if _, err := s.BatchExists(ctx(t), keys, 0); !errors.Is(err, kvoffload.ErrTooLarge) {
		t.Errorf("BatchExists of 4097 keys, one invalid: %v, want ErrTooLarge", err)
	}
	if _, err := s.Remove(ctx(t), keys); !errors.Is(err, kvoffload.ErrTooLarge) {
		t.Errorf("Remove of 4097 keys, one invalid: %v, want ErrTooLarge", err)
	}
}

// endedContext: a call whose context has ended does nothing and fails with ErrUnavailable
// wrapping the context's error, whatever the method.
func endedContext(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	offload(t, s, obj(p+"there", "v"))
	c, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, kvoffload.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Errorf("%s with an ended context: %v, want ErrUnavailable wrapping context.Canceled", op, err)
		}
	}
	_, err := s.BatchOffload(c, kvoffload.NewTxnID(), []kvoffload.Object{obj(p+"new", "v")})
	check("BatchOffload", err)
	_, err = s.BatchGet(c, []string{p + "there"})
	check("BatchGet", err)
	_, err = s.BatchGetInto(c, []string{p + "there"}, [][]byte{make([]byte, 8)})
	check("BatchGetInto", err)
	_, err = s.BatchExists(c, []string{p + "there"}, 0)
	check("BatchExists", err)
	_, err = s.Remove(c, []string{p + "there"})
	check("Remove", err)
	_, err = s.Stats(c)
	check("Stats", err)
	got := get(t, s, p+"new", p+"there")
	if got[0].Status != kvoffload.NotFound {
		t.Errorf("an offload with an ended context stored its key: %+v", got[0])
	}
	wantFound(t, got[1], "v") // the Remove did nothing
}

// callerOwnsValues: once BatchOffload returns, the caller may reuse its buffers; the store
// kept its own copy. A key named twice in a Remove is reported removed at both positions.
func callerOwnsValues(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	buf := []byte("original")
	want(t, offload(t, s, kvoffload.Object{Key: p + "v", Value: buf})[0], kvoffload.Stored, kvoffload.CodeNone)
	copy(buf, "CHANGED!")
	wantFound(t, get(t, s, p+"v")[0], "original")
	rm, err := s.Remove(ctx(t), []string{p + "v", p + "v"})
	if err != nil || len(rm) != 2 || !rm[0].Removed || !rm[1].Removed {
		t.Fatalf("Remove of a key named twice: %+v %v, want removed at both positions", rm, err)
	}
}

// singleFlight: concurrent offloads of one key with the same bytes store it once.
func singleFlight(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	const n = 8
	value := bytes.Repeat([]byte("kv"), 32<<10)
	var wg sync.WaitGroup
	res := make([]kvoffload.KeyResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r []kvoffload.KeyResult
			r, errs[i] = s.BatchOffload(ctx(t), kvoffload.NewTxnID(), []kvoffload.Object{{Key: p + "shared", Value: value}})
			if errs[i] == nil {
				res[i] = r[0]
			}
		}()
	}
	wg.Wait()
	stored := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("writer %d: %v", i, errs[i])
		}
		switch res[i].Outcome {
		case kvoffload.Stored:
			stored++
		case kvoffload.AlreadyStored:
		default:
			t.Fatalf("writer %d: %+v", i, res[i])
		}
	}
	if stored != 1 {
		t.Fatalf("%d writers got Stored, want exactly 1", stored)
	}
	if r := get(t, s, p+"shared")[0]; r.Status != kvoffload.Found || !bytes.Equal(r.Value, value) {
		t.Fatalf("shared key: %s, %d bytes", r.Status, len(r.Value))
	}
}

func stats(t *testing.T, s kvoffload.Store) {
	p := prefix(t)
	before, err := s.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	offload(t, s, obj(p+"s1", "abc"), obj(p+"s2", "de"))
	st, err := s.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Keys-before.Keys != 2 || st.Bytes-before.Bytes != 5 || st.NodeID == "" || st.Counters["stored"]-before.Counters["stored"] != 2 {
		t.Fatalf("Stats: %+v after %+v, want 2 more keys, 5 more bytes, a node ID, 2 more stored", st, before)
	}
}
