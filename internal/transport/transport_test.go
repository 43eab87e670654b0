package transport

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

func TestPoolClasses(t *testing.T) {
	p := &Pool{}
	for _, c := range []struct{ n, capacity int }{{1, 4 << 10}, {4 << 10, 4 << 10}, {4<<10 + 1, 8 << 10},
		{256 << 10, 256 << 10}, {256<<10 + 40, 512 << 10}, {16 << 20, 16 << 20}, {16<<20 + 1, 16<<20 + 1}} {
		b := p.Get(c.n)
		if len(*b) != c.n || cap(*b) != c.capacity {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", c.n, len(*b), cap(*b), c.n, c.capacity)
		}
		p.Put(b)
	}
	// a buffer handed back is handed out again, resliced to the length asked
	b := p.Get(100 << 10)
	(*b)[0] = 7
	p.Put(b)
	if c := p.Get(70 << 10); len(*c) != 70<<10 || cap(*c) != 128<<10 {
		t.Errorf("reused buffer: len %d cap %d", len(*c), cap(*c))
	}
	// a buffer whose capacity is no class is not kept (it would be handed out short)
	odd := make([]byte, 5000)
	p.Put(&odd)
	if c := p.Get(5000); cap(*c) != 8<<10 {
		t.Errorf("a 5000-byte buffer was kept: cap %d", cap(*c))
	}
}

// TestCodecRoundTrip: the codec's bytes are protobuf's, both below and above the pooling
// threshold, and a message gathered from several buffers (frames) decodes whole.
func TestCodecRoundTrip(t *testing.T) {
	for _, n := range []int{0, 100, 256 << 10} {
		in := &pb.OffloadChunk{Key: "k", Size: uint64(n), Data: bytes.Repeat([]byte{0xab}, n)}
		data, err := codec{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := proto.Marshal(in)
		got := data.Materialize()
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: the codec's encoding differs from proto.Marshal's", n)
		}
		data.Free()
		var frames mem.BufferSlice
		for off := 0; off < len(want); off += 16 << 10 {
			frames = append(frames, mem.SliceBuffer(want[off:min(off+16<<10, len(want))]))
		}
		out := &pb.OffloadChunk{}
		if err := (codec{}).Unmarshal(frames, out); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(in, out) {
			t.Fatalf("%d bytes: round trip differs", n)
		}
	}
	if _, err := (codec{}).Marshal("not a message"); err == nil {
		t.Error("marshalling a string: no error")
	}
}
