package bucketstore

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/vfs"
)

func encodeTest(tb testing.TB, h Header, payload []byte) []byte {
	tb.Helper()
	buf := vfs.AlignedBuffer(int(RecordSize(len(h.Key), len(payload))))
	if err := EncodeRecord(buf, h, payload); err != nil {
		tb.Fatalf("EncodeRecord: %v", err)
	}
	return buf
}

func TestRecordRoundTrip(t *testing.T) {
	cases := []struct {
		name          string
		keyLen, paylo int
	}{
		{"empty payload", 1, 0},
		{"exactly one block", 40, Alignment - headerLen - 40},
		{"one byte over a block", 40, Alignment - headerLen - 39},
		{"max key", MaxKeyLen, 100},
		{"64KiB payload", 200, 64 << 10},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			payload := testkit.Payload(uint64(i), tc.paylo)
			h := testHeader(strings.Repeat("k", tc.keyLen), uint64(i), payload)
			buf := encodeTest(t, h, payload)
			if int64(len(buf))%Alignment != 0 {
				t.Fatalf("record length %d not aligned", len(buf))
			}
			got, gotPayload, err := DecodeRecord(buf)
			if err != nil {
				t.Fatalf("DecodeRecord: %v", err)
			}
			if got != h || !bytes.Equal(gotPayload, payload) {
				t.Fatalf("round trip: got %+v, want %+v", got, h)
			}
		})
	}
}

func TestRecordSize(t *testing.T) {
	for _, tc := range []struct {
		key, payload int
		want         int64
	}{
		{0, 0, Alignment}, {1, Alignment - headerLen - 1, Alignment},
		{1, Alignment - headerLen, 2 * Alignment}, {10, 256 << 10, 256<<10 + Alignment},
	} {
		if got := RecordSize(tc.key, tc.payload); got != tc.want {
			t.Errorf("RecordSize(%d, %d) = %d, want %d", tc.key, tc.payload, got, tc.want)
		}
	}
}

func TestEncodeRecordRejects(t *testing.T) {
	payload := []byte("payload")
	good := testHeader("key", 1, payload)
	size := int(RecordSize(3, len(payload)))
	cases := []struct {
		name    string
		buf     []byte
		h       Header
		payload []byte
	}{
		{"key too long", make([]byte, RecordSize(MaxKeyLen+1, len(payload))),
			testHeader(strings.Repeat("k", MaxKeyLen+1), 1, payload), payload},
		{"buffer too short", make([]byte, size-1), good, payload},
		{"buffer too long", make([]byte, size+Alignment), good, payload},
		{"payload length mismatch", make([]byte, size), Header{Key: "key", PayloadLen: 1, PayloadSum: good.PayloadSum}, payload},
		{"payload changed after hashing", make([]byte, size), good, []byte("PAYLOAD")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := EncodeRecord(tc.buf, tc.h, tc.payload); err == nil {
				t.Fatal("EncodeRecord succeeded")
			}
		})
	}
}

// TestEncodeRecordVerifiesTheCopy: a payload of several hash chunks encodes into a record
// that decodes to it, and one whose last chunk differs from the bytes the header's sum was
// taken of is refused, leaving the buffer zeroed (no record), not a record that a read would
// find corrupt.
func TestEncodeRecordVerifiesTheCopy(t *testing.T) {
	payload := testkit.Payload(7, 3*hashChunk+100)
	h := testHeader("key", 1, payload)
	buf := make([]byte, RecordSize(len(h.Key), len(payload)))
	if err := EncodeRecord(buf, h, payload); err != nil {
		t.Fatal(err)
	}
	if _, got, err := DecodeRecord(buf); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("DecodeRecord: %v (payload equal: %v)", err, bytes.Equal(got, payload))
	}
	changed := append([]byte(nil), payload...)
	changed[len(changed)-1] ^= 1
	if err := EncodeRecord(buf, h, changed); !errors.Is(err, ErrPayloadChanged) {
		t.Fatalf("EncodeRecord of a changed payload: %v, want ErrPayloadChanged", err)
	}
	if i := slices.IndexFunc(buf, func(b byte) bool { return b != 0 }); i >= 0 {
		t.Fatalf("after the refusal byte %d of the buffer is %#x, want the buffer zeroed", i, buf[i])
	}
}

// TestDecodeRecordRejectsEveryBitFlip flips each bit of a one-block record (header, key,
// payload, padding) and expects ErrCorrupt every time.
func TestDecodeRecordRejectsEveryBitFlip(t *testing.T) {
	rng := testkit.Rand(t)
	key := strings.Repeat("x", 1+rng.IntN(40))
	payload := testkit.Payload(rng.Uint64(), rng.IntN(Alignment-headerLen-len(key)))
	buf := encodeTest(t, testHeader(key, rng.Uint64(), payload), payload)
	for bit := range len(buf) * 8 {
		buf[bit/8] ^= 1 << (bit % 8)
		if _, _, err := DecodeRecord(buf); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit %d (byte %d) flipped: err %v, want ErrCorrupt", bit, bit/8, err)
		}
		buf[bit/8] ^= 1 << (bit % 8)
	}
	if _, _, err := DecodeRecord(buf); err != nil {
		t.Fatalf("restored record: %v", err)
	}
}

func TestDecodeRecordRejectsWrongLength(t *testing.T) {
	payload := testkit.Payload(1, 5000)
	buf := encodeTest(t, testHeader("key", 1, payload), payload)
	for _, b := range [][]byte{nil, buf[:headerLen-1], buf[:Alignment], append(buf, make([]byte, Alignment)...)} {
		if _, _, err := DecodeRecord(b); !IsCorrupt(err) {
			t.Errorf("length %d: err %v, want ErrCorrupt", len(b), err)
		}
	}
}

// TestRecordGolden pins the on-disk bytes of one record. Regenerate with -update.
func TestRecordGolden(t *testing.T) {
	payload := []byte("kv-cache block payload")
	h := NewHeader("model/layer0/block7", [16]byte{0: 0xaa, 15: 0x55}, 42, payload)
	buf := encodeTest(t, h, payload)
	path := filepath.Join("testdata", "record.golden")
	want := testkit.Golden(t, path, buf, "the record")
	if _, _, err := DecodeRecord(want); err != nil {
		t.Fatalf("golden record does not decode: %v", err)
	}
}

// FuzzDecodeRecord: never panic; whatever decodes must re-encode to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	for i, n := range []int{0, 10, 5000} {
		payload := testkit.Payload(uint64(i), n)
		f.Add(encodeTest(f, testHeader("fuzz", uint64(i), payload), payload))
	}
	f.Add([]byte("KVB1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, payload, err := DecodeRecord(data)
		if err != nil {
			if !IsCorrupt(err) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		again := make([]byte, len(data))
		if err := EncodeRecord(again, h, payload); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatal("decoded record re-encodes differently")
		}
	})
}
