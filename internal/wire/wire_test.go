package wire

import (
	"io"
	"testing"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// Codes from the wire are never truncated into another code, a stored key has none and a key
// that is not stored always has one (adversarial review: 260 read as quota, 256 as none).
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
