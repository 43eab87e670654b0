package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

func goldenRecord() Record {
	r := Record{Type: RecordIntent, Payload: []byte("hello, kv")}
	for i := range r.TxnID {
		r.TxnID[i] = byte(i)
	}
	return r
}

func TestEnvelopeRoundTrip(t *testing.T) {
	var id [16]byte
	copy(id[:], "0123456789abcdef")
	cases := []struct {
		name string
		rec  Record
	}{
		{"intent with payload", Record{Type: RecordIntent, TxnID: id, Payload: []byte("keys and extents")}},
		{"intent empty payload", Record{Type: RecordIntent, TxnID: id}},
		{"done", Record{Type: RecordDone, TxnID: id}},
		{"done with payload", Record{Type: RecordDone, Payload: []byte{0}}},
		{"large payload", Record{Type: RecordIntent, Payload: bytes.Repeat([]byte("abc"), 100000)}},
		{"payload holding an envelope", Record{Type: RecordIntent, Payload: appendEnvelope(nil, goldenRecord())}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, err := encodeRecord(tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			if len(env) != envOverhead+len(tc.rec.Payload) {
				t.Fatalf("envelope is %d bytes, want %d", len(env), envOverhead+len(tc.rec.Payload))
			}
			got, err := decodeRecord(env)
			if err != nil {
				t.Fatal(err)
			}
			if !sameRecord(got, tc.rec) {
				t.Fatalf("decoded %+v, want %+v", got, tc.rec)
			}
			if n, ok := envelopeAt(append(env, 0, 1, 2)); !ok || n != len(env) {
				t.Fatalf("envelopeAt = %d, %v; want %d, true", n, ok, len(env))
			}
		})
	}
}

func TestEncodeRejectsInvalidRecords(t *testing.T) {
	cases := []struct {
		name string
		rec  Record
	}{
		{"zero type", Record{}},
		{"unknown type", Record{Type: 4}},
		{"max type", Record{Type: 255}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := encodeRecord(tc.rec); !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("encodeRecord = %v, want ErrInvalidRecord", err)
			}
		})
	}
}

// resum recomputes the checksum of env after a test changed it.
func resum(env []byte) []byte {
	body := env[:len(env)-envSumSize]
	binary.LittleEndian.PutUint64(env[len(body):], xxhash.Sum64(body))
	return env
}

func TestDecodeRejectsEveryBadField(t *testing.T) {
	good := appendEnvelope(nil, goldenRecord())
	edit := func(fn func(b []byte) []byte) []byte { return fn(bytes.Clone(good)) }
	cases := []struct {
		name string
		data []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"one zero byte", []byte{0}},
		{"short by one", good[:envOverhead-1]},
		{"header only", good[:envHeaderSize]},
		{"truncated payload", good[:len(good)-1]},
		{"trailing byte", append(bytes.Clone(good), 0)},
		{"all zeros", make([]byte, len(good))},
		{"bad magic", edit(func(b []byte) []byte { b[0] = 'k'; return resum(b) })},
		{"bad magic unsummed", edit(func(b []byte) []byte { b[3] = '2'; return b })},
		{"version 0", edit(func(b []byte) []byte { b[offVersion] = 0; return resum(b) })},
		{"version 2", edit(func(b []byte) []byte { b[offVersion] = 2; return resum(b) })},
		{"type 0", edit(func(b []byte) []byte { b[offType] = 0; return resum(b) })},
		{"type 4", edit(func(b []byte) []byte { b[offType] = 4; return resum(b) })},
		{"type flipped unsummed", edit(func(b []byte) []byte { b[offType] = byte(RecordDone); return b })},
		{"txnID flipped", edit(func(b []byte) []byte { b[offTxnID+5] ^= 1; return b })},
		{"len too big", edit(func(b []byte) []byte { b[offPayloadLen]++; return resum(b) })},
		{"len too small", edit(func(b []byte) []byte { b[offPayloadLen]--; return resum(b) })},
		{"len huge", edit(func(b []byte) []byte { b[offPayloadLen+3] = 0xff; return resum(b) })},
		{"payload flipped", edit(func(b []byte) []byte { b[envHeaderSize] ^= 0x80; return b })},
		{"checksum flipped", edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeRecord(tc.data); !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("decodeRecord = %v, want ErrInvalidRecord", err)
			}
			if _, ok := envelopeAt(tc.data); ok && len(tc.data) == len(good) {
				t.Fatal("envelopeAt accepted a bad envelope")
			}
		})
	}
}

// TestEnvelopeGolden pins the on-disk bytes of one envelope. Regenerate with
// go test ./wal -run TestEnvelopeGolden -update (only for a deliberate,
// versioned format change).
func TestEnvelopeGolden(t *testing.T) {
	path := filepath.Join("testdata", "envelope.golden")
	got := appendEnvelope(nil, goldenRecord())
	want := testkit.Golden(t, path, got, "the envelope")
	rec, err := decodeRecord(want)
	if err != nil || !sameRecord(rec, goldenRecord()) {
		t.Fatalf("golden decodes to %+v, %v", rec, err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, envOverhead))
	f.Add(appendEnvelope(nil, goldenRecord()))
	f.Add(appendEnvelope(nil, Record{Type: RecordDone}))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := decodeRecord(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("error %v does not wrap ErrInvalidRecord", err)
			}
			return
		}
		if again := appendEnvelope(nil, rec); !bytes.Equal(again, data) {
			t.Fatalf("re-encoding %+v gives %x, want %x", rec, again, data)
		}
	})
}

// FuzzScan checks that walking arbitrary segment bytes never panics and that
// what it accepts is a prefix of valid entries.
func FuzzScan(f *testing.F) {
	seg := []byte{}
	for _, rec := range makeRecords("f", 3) {
		env := appendEnvelope(nil, rec)
		seg = binary.AppendUvarint(seg, uint64(len(env)))
		seg = append(seg, env...)
	}
	f.Add(seg)
	f.Add(append(bytes.Clone(seg), 0, 0, 0))
	f.Add(seg[:len(seg)-5])
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := scanEntries(data)
		if sc.end > len(data) || (sc.reason == "") != (sc.end == len(data)) {
			t.Fatalf("scan = %+v for %d bytes", sc, len(data))
		}
		if again := scanEntries(data[:sc.end]); again.reason != "" || again.count != sc.count {
			t.Fatalf("valid prefix rescans as %+v, want %d entries", again, sc.count)
		}
		if sc.reason != "" && countFrames(data[sc.end:]) < 1 {
			t.Fatal("a damaged tail counts no entries")
		}
		validEnvelopeAfter(data, sc.end)
	})
}
