package txn

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/txn/txntest"
	"github.com/kvoffload/kvoffload/vfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
	"github.com/kvoffload/kvoffload/wal"
)

// goldenIntent is the intent behind testdata/intent-json.golden (written by the JSON encoding
// of binaries before version 1) and testdata/intent-v1.golden.
func goldenIntent() intent {
	return intent{Node: "node-1", Entries: []fsm.Entry{
		{Key: "conv/0001/layer-00", Extent: fsm.Extent{Bucket: 1, Offset: 0, Length: 8192}, Size: 4000, Sum: 0xfedcba9876543210, Gen: 1},
		{Key: "conv/0001/layer-01 \"q\" é\u2028", Extent: fsm.Extent{Bucket: 1<<32 - 1, Offset: 1 << 40, Length: 4096}, Size: 0, Sum: 1, Gen: 1<<64 - 1},
	}}
}

// legacyJSON is in as binaries before version 1 wrote it (jsonIntent).
func legacyJSON(t testing.TB, in intent) []byte {
	t.Helper()
	j := jsonIntent{Node: in.Node}
	for _, e := range in.Entries {
		j.Entries = append(j.Entries, jsonEntry{Key: e.Key, Bucket: e.Extent.Bucket, Offset: e.Extent.Offset,
			Length: e.Extent.Length, Size: e.Size, Sum: e.Sum, Gen: e.Gen})
	}
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIntentGolden pins the bytes of the version 1 body. Regenerate with
// go test ./txn -run TestIntentGolden -update (only for a deliberate, versioned change).
func TestIntentGolden(t *testing.T) {
	path := filepath.Join("testdata", "intent-v1.golden")
	got := goldenIntent().encode()
	want := testkit.Golden(t, path, got, "the intent body")
	in, err := decodeIntent(want)
	if err != nil || !reflect.DeepEqual(in, goldenIntent()) {
		t.Fatalf("golden decodes to %+v, %v", in, err)
	}
}

// TestIntentJSONCompat: the JSON body that binaries before version 1 wrote (the fixture was
// written by one) still decodes, and jsonIntent's tags still write exactly it, so jsonIntents
// below makes what those binaries left in a WAL.
func TestIntentJSONCompat(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "intent-json.golden"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := decodeIntent(data)
	if err != nil || !reflect.DeepEqual(in, goldenIntent()) {
		t.Fatalf("JSON fixture decodes to %+v, %v; want %+v", in, err, goldenIntent())
	}
	if again := legacyJSON(t, goldenIntent()); !bytes.Equal(again, data) {
		t.Fatalf("legacyJSON gives %s; want the fixture %s", again, data)
	}
}

// jsonIntents rewrites every INTENT body of l in the JSON form of binaries before version 1.
func jsonIntents(t *testing.T, l *memLog) int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i, r := range l.entries {
		if r.Type != wal.RecordIntent {
			continue
		}
		in, err := decodeIntent(r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		l.entries[i].Payload = legacyJSON(t, in)
		n++
	}
	return n
}

// A WAL left by a binary that wrote JSON INTENT bodies recovers: its unresolved transaction
// is rolled forward and its key serves.
func TestRecoverJSONIntent(t *testing.T) {
	mem, log, m := memfs.New(), &memLog{}, txntest.NewMeta()
	c, data, _, err := restart(t, mem, log, m)
	if err != nil {
		t.Fatal(err)
	}
	m.FailNext(1 << 30) // every proposal is lost: the process "dies" with the intent open
	if _, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{obj("k", 7)}); !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("offload with every proposal lost: %v, want ErrIndeterminate", err)
	}
	c.Close()
	data.Close()
	if n := jsonIntents(t, log); n != 1 {
		t.Fatalf("%d INTENT records in the WAL, want 1", n)
	}

	m.FailNext(0)
	c, data, rep, err := restart(t, mem, log, m)
	defer data.Close()
	defer c.Close()
	if err != nil || rep.RolledFwd != 1 {
		t.Fatalf("recovery over a JSON intent: %+v, %v; want one rolled forward", rep, err)
	}
	got, err := c.BatchGet(context.Background(), []string{"k"})
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].Value, obj("k", 7).Value) {
		t.Fatalf("get after recovery: %+v, %v", got, err)
	}
}

// restart opens the bucket store on mem and a coordinator over log and m, as a process start
// does, and returns the recovery's report and error.
func restart(t *testing.T, mem vfs.FS, log *memLog, m Meta) (*Coordinator, *bucketstore.Store, RecoveryReport, error) {
	t.Helper()
	cfg := bucketstore.DefaultConfig("/b")
	cfg.FS = mem
	data, err := bucketstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc := DefaultConfig("n1")
	tc.CommitTimeout = 200 * time.Millisecond
	c, err := New(tc, log, data, m)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Recover(context.Background())
	return c, data, rep, err
}

func TestDecodeIntentRefuses(t *testing.T) {
	good := goldenIntent().encode()
	edit := func(f func([]byte) []byte) []byte { return f(bytes.Clone(good)) }
	countAt := 1 + 1 + len("node-1")
	cases := map[string][]byte{
		"empty":           {},
		"version 0":       edit(func(b []byte) []byte { b[0] = 0; return b }),
		"version 2":       edit(func(b []byte) []byte { b[0] = 2; return b }),
		"count too large": edit(func(b []byte) []byte { b[countAt] = 0x7f; return b }),
		"bucket overflow": append(binary.AppendUvarint([]byte{intentVersion, 0, 1, 0}, 1<<32), make([]byte, 16)...),
		"trailing byte":   append(bytes.Clone(good), 0),
		"json garbage":    []byte(`{"node":`),
		"json trailing":   []byte(`{} {}`),
		"json bad type":   []byte(`{"entries":[{"bucket":-1}]}`),
	}
	for i := range good {
		cases[fmt.Sprintf("truncated at %d", i)] = good[:i]
	}
	for name, data := range cases {
		if in, err := decodeIntent(data); !errors.Is(err, errBadIntent) {
			t.Errorf("%s: decodeIntent = %+v, %v; want errBadIntent", name, in, err)
		}
	}
}

// FuzzDecodeIntent: decodeIntent never panics, its errors wrap errBadIntent, and whatever it
// accepts (version 1 or JSON) encodes to a body that decodes to the same intent and encodes
// again to the same bytes.
func FuzzDecodeIntent(f *testing.F) {
	f.Add(goldenIntent().encode())
	f.Add(intent{}.encode())
	f.Add(legacyJSON(f, goldenIntent()))
	f.Add([]byte(`{"node":"n","entries":[]}`))
	f.Add([]byte{intentVersion, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := decodeIntent(data)
		if err != nil {
			if !errors.Is(err, errBadIntent) {
				t.Fatalf("error %v does not wrap errBadIntent", err)
			}
			return
		}
		enc := in.encode()
		in2, err := decodeIntent(enc)
		if err != nil || !reflect.DeepEqual(in2, in) {
			t.Fatalf("round trip: %+v, %v; want %+v", in2, err, in)
		}
		if !bytes.Equal(in2.encode(), enc) {
			t.Fatal("encoding is not deterministic")
		}
	})
}

// Recovery decodes only the intents that have no DONE: a resolved INTENT whose body this
// binary cannot read is history and does not stop a start-up; an unresolved one does, naming
// its WAL index.
func TestRecoverDecodesOnlyUnresolvedIntents(t *testing.T) {
	mem, log, m := memfs.New(), &memLog{}, txntest.NewMeta()
	resolved, open := kvoffload.NewTxnID(), kvoffload.NewTxnID()
	garbage := []byte{intentVersion + 1, 1, 2, 3}
	_, _ = log.Append(wal.Record{Type: wal.RecordIntent, TxnID: resolved, Payload: garbage},
		wal.Record{Type: wal.RecordDone, TxnID: resolved})
	c, data, rep, err := restart(t, mem, log, m)
	c.Close()
	data.Close()
	if err != nil || rep.Intents != 1 || rep.Unresolved != 0 {
		t.Fatalf("recovery over a resolved unreadable intent: %+v, %v; want it counted and skipped", rep, err)
	}
	_, _ = log.Append(wal.Record{Type: wal.RecordIntent, TxnID: open, Payload: garbage})
	idx := log.LastIndex()
	c, data, _, err = restart(t, mem, log, m)
	c.Close()
	data.Close()
	if !errors.Is(err, errBadIntent) || !strings.Contains(err.Error(), fmt.Sprintf("wal index %d", idx)) {
		t.Fatalf("recovery over an unresolved unreadable intent: %v; want errBadIntent naming wal index %d", err, idx)
	}
}
