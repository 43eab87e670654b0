package transport

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized tests (0: time-based)")

func seed(t *testing.T) *rand.Rand {
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun: go test ./internal/transport -run %s -seed %d)", s, t.Name(), s)
	return rand.New(rand.NewPCG(s, 1))
}

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
	rng := seed(t)
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
	rng := seed(t)
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
	for name, b := range map[string][]byte{"twice": twice, "unknown": unknown, "truncated": truncated} {
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
		if len(b) < zeroCopyBytes { // the split path starts there; pad small inputs into it
			b = append(b, make([]byte, zeroCopyBytes-len(b))...)
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
