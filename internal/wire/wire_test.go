package wire

import (
	"io"
	"testing"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// Codes from the wire are never truncated into another code (260 must not read as quota, nor
// 256 as none), a stored key has none and a key that is not stored always has one.
func TestCodesFromTheWire(t *testing.T) {
	for _, tc := range []struct {
		in   *pb.KeyResult
		want kvoffload.Code
	}{
		{&pb.KeyResult{Outcome: pb.Outcome_OUTCOME_REJECTED, Code: 260}, kvoffload.CodeInternal},
		{&pb.KeyResult{Outcome: pb.Outcome_OUTCOME_REJECTED, Code: 256}, kvoffload.CodeInternal},
		{&pb.KeyResult{Outcome: pb.Outcome_OUTCOME_FAILED, Code: -1}, kvoffload.CodeInternal},
		{&pb.KeyResult{Outcome: pb.Outcome_OUTCOME_FAILED}, kvoffload.CodeInternal},
		{&pb.KeyResult{Outcome: pb.Outcome_OUTCOME_REJECTED, Code: pb.Code_CODE_QUOTA}, kvoffload.CodeQuota},
		{&pb.KeyResult{Outcome: pb.Outcome_OUTCOME_FAILED, Code: 200}, kvoffload.Code(200)},
		{&pb.KeyResult{Outcome: pb.Outcome_OUTCOME_STORED, Code: pb.Code_CODE_QUOTA}, kvoffload.CodeNone},
		{&pb.KeyResult{Outcome: 9}, kvoffload.CodeInternal},
	} {
		if got := KeyResultFromPB(tc.in, "k"); got.Code != tc.want {
			t.Errorf("%v: code %v, want %v", tc.in, got.Code, tc.want)
		}
	}
	chunks := []*pb.GetChunk{
		{Index: 0, Status: pb.GetStatus_GET_STATUS_NOT_FOUND, Code: 260},
		{Index: 1, Status: pb.GetStatus_GET_STATUS_FOUND, Size: 2, Data: []byte("ab"), Code: pb.Code_CODE_CORRUPT},
		{Index: 2, Status: pb.GetStatus_GET_STATUS_UNAVAILABLE},
	}
	res, err := Collect(func() (*pb.GetChunk, error) {
		if len(chunks) == 0 {
			return nil, io.EOF
		}
		ch := chunks[0]
		chunks = chunks[1:]
		return ch, nil
	}, []string{"a", "b", "c"}, nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Code != kvoffload.CodeInternal || res[1].Code != kvoffload.CodeNone || string(res[1].Value) != "ab" || res[2].Code != kvoffload.CodeUnavailable {
		t.Fatalf("%+v", res)
	}
}

// TestSendGetChunksDoNotPinLongValues: a value of one chunk is sent from its own bytes (no
// copy), and the chunks of a longer value are copies, so a message gRPC keeps for a client
// that stopped reading holds a chunk, not the whole value; either way the chunks reassemble to
// the value.
func TestSendGetChunksDoNotPinLongValues(t *testing.T) {
	for _, size := range []int{ChunkBytes, 3*ChunkBytes + 17} {
		val := make([]byte, size)
		for i := range val {
			val[i] = byte(i * 7)
		}
		var chunks []*pb.GetChunk
		if err := SendGet(func(c *pb.GetChunk) error { chunks = append(chunks, c); return nil }, 0,
			kvoffload.GetResult{Key: "k", Status: kvoffload.Found, Value: val}); err != nil {
			t.Fatal(err)
		}
		var got []byte
		for _, c := range chunks {
			aliases := len(c.Data) > 0 && &c.Data[0] == &val[len(got)]
			if want := size <= ChunkBytes; aliases != want {
				t.Fatalf("%d-byte value: a chunk aliases the value: %v, want %v", size, aliases, want)
			}
			got = append(got, c.Data...)
		}
		if string(got) != string(val) {
			t.Fatalf("%d-byte value: chunks reassemble to %d other bytes", size, len(got))
		}
	}
}
