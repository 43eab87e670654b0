package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

var goldenTxn = TxnID{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe}

// goldenResult is the Result behind testdata/result-json.golden (written by the JSON encoding
// of binaries before the binary format) and testdata/result-v1.golden.
func goldenResult() *Result {
	return &Result{TxnID: goldenTxn, Type: CmdCommit, Index: 1234567, Keys: []KeyOutcome{
		{Key: "conv/0001/layer-00", Outcome: OutcomeStored, Entry: Entry{Key: "conv/0001/layer-00", Owner: "node-1",
			Extent: Extent{Bucket: 1, Offset: 0, Length: 8192}, Size: 4000, Sum: 0xfedcba9876543210, Gen: 1, TxnID: goldenTxn}},
		{Key: "conv/0001/layer-01", Outcome: OutcomeStale},
		{Key: "old", Outcome: OutcomeRemoved, Shared: true, Entry: Entry{Key: "old", Owner: "node-2",
			Extent: Extent{Bucket: 7, Offset: 4096, Length: 4096}, Size: 10, Sum: 42, Gen: 1<<64 - 1, TxnID: TxnID{9}}},
	}}
}

// TestResultGolden pins the bytes of the binary form. Regenerate with
// go test ./fsm -run TestResultGolden -update (only for a deliberate, versioned change).
func TestResultGolden(t *testing.T) {
	path := filepath.Join("testdata", "result-v1.golden")
	got := EncodeResult(goldenResult())
	want := testkit.Golden(t, path, got, "the result")
	r, err := DecodeResult(want)
	if err != nil || !reflect.DeepEqual(r, goldenResult()) {
		t.Fatalf("golden decodes to %+v, %v", r, err)
	}
}

// TestResultJSONCompat: the JSON that binaries before the binary format sent (the fixtures
// were written by them) still decodes, so a follower of this binary reads a Result from a
// leader of the old one.
func TestResultJSONCompat(t *testing.T) {
	for _, tc := range []struct {
		file string
		want *Result
	}{
		{"result-json.golden", goldenResult()},
		{"result-member-json.golden", &Result{TxnID: TxnID{7}, Type: CmdMember, Index: 9}},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		r, err := DecodeResult(data)
		if err != nil || !reflect.DeepEqual(r, tc.want) {
			t.Fatalf("%s decodes to %+v, %v; want %+v", tc.file, r, err, tc.want)
		}
	}
}

// appliedResults returns the Results of one command of each type, as Apply records them.
func appliedResults(t testing.TB) []*Result {
	f := New()
	for _, k := range []string{"twin", "twin2"} { // overlapping: only a snapshot can hold these
		f.st.addLive(Entry{Key: k, Owner: "n1", Gen: 1, Size: 10, Extent: Extent{Bucket: 1, Length: 10}})
	}
	cmds := [][]byte{
		commit(1, ent("a", 1, 1), ent("b", 2, 3), entShared("c", 1, 0)),
		commit(2, ent("a", 1, 1), ent("a", 1, 2)),
		remove(3, KeyGen{Key: "a"}, KeyGen{Key: "gone"}),
		remove(4, KeyGen{Key: "twin"}),
		commit(5),
		remove(6),
		abort(7),
		setMember(8, "n1", "r1", "a1"),
		delMember(9, "n1"),
		EncodeSetCluster(SetCluster{TxnID: id(10), ID: "c-1"}),
		EncodeSetCluster(SetCluster{TxnID: id(11), ID: "c-2"}),
		EncodePrune(Prune{TxnID: id(12), Before: 2}),
	}
	var out []*Result
	for i, c := range cmds {
		out = append(out, f.ApplyCommand(uint64(i+1), c))
	}
	if !out[3].Keys[0].Shared {
		t.Fatalf("remove of twin: %+v, want a shared outcome", out[3].Keys)
	}
	return out
}

// TestResultRoundTrip: every Result Apply makes decodes, from either form, to itself.
func TestResultRoundTrip(t *testing.T) {
	for _, want := range appliedResults(t) {
		got, err := DecodeResult(EncodeResult(want))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("binary: %#v, %v; want %#v", got, err, want)
		}
		j, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if got, err = DecodeResult(j); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("json: %+v, %v; want %+v", got, err, want)
		}
	}
}

func TestDecodeResultRefuses(t *testing.T) {
	good := EncodeResult(goldenResult())
	edit := func(f func([]byte) []byte) []byte { return f(bytes.Clone(good)) }
	keyAt := len(resultMagic) + 1 + 16 + 1 + 3 + 1 + 1 // first key outcome's key length
	outcomeAt := keyAt + 1 + len("conv/0001/layer-00")
	cases := map[string][]byte{
		"empty":           {},
		"magic only":      []byte(resultMagic),
		"bad magic":       edit(func(b []byte) []byte { b[0] = 'X'; return b }),
		"version 0":       edit(func(b []byte) []byte { b[4] = 0; return b }),
		"version 2":       edit(func(b []byte) []byte { b[4] = 2; return b }),
		"type 0":          edit(func(b []byte) []byte { b[5+16] = 0; return b }),
		"type 7":          edit(func(b []byte) []byte { b[5+16] = 7; return b }),
		"aborted 2":       edit(func(b []byte) []byte { b[5+16+1+3] = 2; return b }),
		"count too large": edit(func(b []byte) []byte { b[keyAt-1] = 0x7f; return b }),
		"outcome 0":       edit(func(b []byte) []byte { b[outcomeAt] = 0; return b }),
		"outcome 9":       edit(func(b []byte) []byte { b[outcomeAt] = 9; return b }),
		"shared 2":        edit(func(b []byte) []byte { b[outcomeAt+1] = 2; return b }),
		"trailing byte":   append(bytes.Clone(good), 0),
		"json garbage":    []byte(`{"TxnID":`),
		"json type 0":     []byte(`{"Index":3}`),
		"json outcome 0":  []byte(`{"Type":1,"Keys":[{"Key":"a"}]}`),
		"json trailing":   []byte(`{"Type":1} {}`),
	}
	for i := range good {
		cases[fmt.Sprintf("truncated at %d", i)] = good[:i]
	}
	for name, data := range cases {
		if r, err := DecodeResult(data); !errors.Is(err, ErrBadResult) {
			t.Errorf("%s: DecodeResult = %+v, %v; want ErrBadResult", name, r, err)
		}
	}
}

// FuzzDecodeResult: DecodeResult never panics, its errors wrap ErrBadResult, and whatever it
// accepts (binary or JSON) encodes to bytes that decode to the same value and encode again to
// the same bytes (a binary input need not be canonical: a varint may have a longer form).
func FuzzDecodeResult(f *testing.F) {
	for _, r := range appliedResults(f) {
		f.Add(EncodeResult(r))
		j, _ := json.Marshal(r)
		f.Add(j)
	}
	f.Add(EncodeResult(goldenResult()))
	f.Add([]byte(resultMagic + "\x01"))
	f.Add([]byte(`{"Type":1,"Keys":[]}`))
	f.Add([]byte(`{"Type":4,"Keys":null,"TxnID":[1,2,300]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeResult(data)
		if err != nil {
			if !errors.Is(err, ErrBadResult) {
				t.Fatalf("error %v does not wrap ErrBadResult", err)
			}
			return
		}
		enc := EncodeResult(r)
		r2, err := DecodeResult(enc)
		if err != nil || !reflect.DeepEqual(r2, r) {
			t.Fatalf("round trip: %+v, %v; want %+v", r2, err, r)
		}
		if !bytes.Equal(EncodeResult(r2), enc) {
			t.Fatal("encoding is not deterministic")
		}
	})
}
