package transport

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// frames cuts b into buffers of random sizes, as HTTP/2 frames arrive.
func frames(rng *rand.Rand, b []byte) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 1+rng.IntN(20<<10))
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return out
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestChunksRoundTrip: offload and get chunks of every size around the zero-copy threshold
// survive the codec both ways, cut into random frames, and the codec's bytes decode with
// proto.Unmarshal to the same message (the wire format is protobuf's).
func TestChunksRoundTrip(t *testing.T) {
	rng := testkit.Rand(t)
	sizes := []int{0, 1, zeroCopyBytes - 1, zeroCopyBytes, zeroCopyBytes + 1, 256 << 10, 1 << 20}
	for i := 0; i < 60; i++ {
		n := sizes[i%len(sizes)]
		msgs := []proto.Message{
			&pb.OffloadChunk{TxnId: randomBytes(rng, 16*rng.IntN(2)), Key: "key/" + string(rune('a'+rng.IntN(26))), Size: rng.Uint64(), Data: randomBytes(rng, n)},
			&pb.GetChunk{Index: rng.Uint32(), Status: pb.GetStatus(rng.IntN(5)), Reason: "r", Size: uint64(n), Data: randomBytes(rng, n), Code: pb.Code(rng.IntN(3))},
		}
		for _, in := range msgs {
			data, err := codec{}.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			wireBytes := data.Materialize()
			plain := in.ProtoReflect().Type().New().Interface()
			if err := proto.Unmarshal(wireBytes, plain); err != nil || !proto.Equal(in, plain) {
				t.Fatalf("%T of %d bytes: proto.Unmarshal of the codec's bytes: %v, equal %v", in, n, err, proto.Equal(in, plain))
			}
			out := in.ProtoReflect().Type().New().Interface()
			if err := (codec{}).Unmarshal(frames(rng, wireBytes), out); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(in, out) {
				t.Fatalf("%T of %d bytes: the round trip differs", in, n)
			}
		}
	}
}

// TestChunksUnusual: encodings the split path does not take (the value twice, an unknown
// field, a truncated value) decode as proto.Unmarshal decodes them, errors included.
func TestChunksUnusual(t *testing.T) {
	rng := testkit.Rand(t)
	value := randomBytes(rng, 64<<10)
	head, _ := proto.Marshal(&pb.OffloadChunk{Key: "k", Size: 7})
	withValue := func(b, v []byte) []byte {
		b = protowire.AppendTag(b, offloadDataField, protowire.BytesType)
		return protowire.AppendBytes(b, v)
	}
	twice := withValue(withValue(append([]byte(nil), head...), value[:40<<10]), value)
	unknown := protowire.AppendBytes(protowire.AppendTag(withValue(append([]byte(nil), head...), value), 99, protowire.BytesType), []byte("x"))
	full := withValue(append([]byte(nil), head...), value)
	truncated := full[:len(full)-1]
	// A varint's tenth byte above 1 overflows 64 bits; protowire refuses it, so must the split
	// decoder, in the value's tag and in its length.
	overflow := func(v uint64) []byte {
		b := make([]byte, 10)
		for i := range 9 {
			b[i] = byte(v>>(7*i))&0x7f | 0x80
		}
		b[9] = 0x02
		return b
	}
	tagOverflow := append(append(append([]byte(nil), head...), overflow(uint64(protowire.EncodeTag(offloadDataField, protowire.BytesType)))...), protowire.AppendBytes(nil, value)...)
	lenOverflow := append(append(protowire.AppendTag(append([]byte(nil), head...), offloadDataField, protowire.BytesType), overflow(uint64(len(value)))...), value...)
	cases := map[string][]byte{"twice": twice, "unknown": unknown, "truncated": truncated, "tag overflow": tagOverflow, "length overflow": lenOverflow}
	for name, b := range cases {
		want := &pb.OffloadChunk{}
		wantErr := proto.Unmarshal(b, want)
		got := &pb.OffloadChunk{}
		err := codec{}.Unmarshal(frames(rng, b), got)
		if (err == nil) != (wantErr == nil) {
			t.Errorf("%s: error %v, proto.Unmarshal's %v", name, err, wantErr)
			continue
		}
		if err == nil && (!proto.Equal(got, want) || !bytes.Equal(got.Data, want.Data)) {
			t.Errorf("%s: decoded differently from proto.Unmarshal", name)
		}
	}
}

// TestChunksManyTinyFields: a message of 1 MiB of two-byte unknown fields arriving in 16-byte
// frames (65,537 of them) decodes as proto.Unmarshal decodes it, in time linear in its size.
// Before the reader kept its remaining length, every field summed every frame left: about
// 5 s for 256 KiB, minutes for a 2 MiB message any client could send.
func TestChunksManyTinyFields(t *testing.T) {
	b := make([]byte, 0, 1<<20)
	for len(b) < 1<<20 {
		b = append(b, 0x7a, 0x00) // field 15, bytes, length 0
	}
	var data mem.BufferSlice
	for off := 0; off < len(b); off += 16 {
		data = append(data, mem.SliceBuffer(b[off:min(off+16, len(b))]))
	}
	start := time.Now()
	var got pb.OffloadChunk
	if err := (codec{}).Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("1 MiB in %d frames took %v: not linear", len(data), took)
	}
	var want pb.OffloadChunk
	if err := proto.Unmarshal(b, &want); err != nil || !proto.Equal(&got, &want) {
		t.Fatalf("decoded differently from proto.Unmarshal (its error: %v)", err)
	}
}

// FuzzUnmarshalChunks: any bytes, cut into frames anyhow, decode into an OffloadChunk or a
// GetChunk as proto.Unmarshal decodes them (the same message, or an error where it errs),
// and never panic: the node decodes whatever a client sends.
func FuzzUnmarshalChunks(f *testing.F) {
	big, _ := proto.Marshal(&pb.OffloadChunk{TxnId: make([]byte, 16), Key: "k", Size: 40 << 10, Data: make([]byte, 40<<10)})
	get, _ := proto.Marshal(&pb.GetChunk{Index: 3, Status: pb.GetStatus_GET_STATUS_FOUND, Size: 40 << 10, Data: make([]byte, 40<<10)})
	f.Add(big, uint64(1))
	f.Add(get, uint64(2))
	f.Add(big[:len(big)-5], uint64(3))
	f.Fuzz(func(t *testing.T, b []byte, cut uint64) {
		if len(b) < zeroCopyBytes { // the split path starts there: a valid unknown field in front of
			// a small input takes it into that path with the fuzzed bytes still what is decoded
			pad := protowire.AppendTag(nil, 15, protowire.BytesType)
			pad = protowire.AppendBytes(pad, make([]byte, zeroCopyBytes))
			b = append(pad, b...)
		}
		rng := rand.New(rand.NewPCG(cut, 0))
		for _, m := range []proto.Message{&pb.OffloadChunk{}, &pb.GetChunk{}} {
			want := m.ProtoReflect().Type().New().Interface()
			wantErr := proto.Unmarshal(b, want)
			err := codec{}.Unmarshal(frames(rng, b), m)
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("%T: error %v, proto.Unmarshal's %v", m, err, wantErr)
			}
			if err == nil && !proto.Equal(m, want) {
				t.Fatalf("%T: decoded differently from proto.Unmarshal", m)
			}
		}
	})
}

// TestSplitKeepsEveryField: splitValue copies the head's fields by hand, so a field added to
// OffloadChunk or GetChunk later must be added there too; this sets every field of each
// message (by reflection) and checks that codec.Marshal's bytes decode to the same message.
func TestSplitKeepsEveryField(t *testing.T) {
	for _, m := range []proto.Message{&pb.OffloadChunk{}, &pb.GetChunk{}} {
		r := m.ProtoReflect()
		fields := r.Descriptor().Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			switch fd.Kind() {
			case protoreflect.BytesKind:
				if fd.Name() == "data" {
					r.Set(fd, protoreflect.ValueOfBytes(bytes.Repeat([]byte{7}, zeroCopyBytes)))
				} else {
					r.Set(fd, protoreflect.ValueOfBytes(bytes.Repeat([]byte{byte(i + 1)}, 16)))
				}
			case protoreflect.StringKind:
				r.Set(fd, protoreflect.ValueOfString(string(fd.Name())))
			case protoreflect.EnumKind:
				r.Set(fd, protoreflect.ValueOfEnum(1))
			case protoreflect.BoolKind:
				r.Set(fd, protoreflect.ValueOfBool(true))
			case protoreflect.Uint32Kind:
				r.Set(fd, protoreflect.ValueOfUint32(uint32(i+1)))
			case protoreflect.Uint64Kind:
				r.Set(fd, protoreflect.ValueOfUint64(uint64(i+1)))
			case protoreflect.Int32Kind:
				r.Set(fd, protoreflect.ValueOfInt32(int32(i+1)))
			case protoreflect.Int64Kind:
				r.Set(fd, protoreflect.ValueOfInt64(int64(i+1)))
			default:
				t.Fatalf("%s: field %s of kind %s: teach this test (and splitValue) about it", r.Descriptor().Name(), fd.Name(), fd.Kind())
			}
		}
		if _, _, _, ok := splitValue(m); !ok {
			t.Fatalf("%s: not split", r.Descriptor().Name())
		}
		data, err := codec{}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got := r.Type().New().Interface()
		if err := proto.Unmarshal(data.Materialize(), got); err != nil || !proto.Equal(got, m) {
			t.Fatalf("%s: a split marshal lost a field (%v): got %v", r.Descriptor().Name(), err, got)
		}
	}
}
