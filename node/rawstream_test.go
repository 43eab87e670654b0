package node

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// A raw gRPC stream whose second object has an empty key gets one result per object, the
// empty key Rejected, instead of the object being taken for a continuation chunk and dropped
// (the Go client refuses empty keys before sending, so only a raw stream reaches this).
func TestRawStreamEmptyKeyObject(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.APIAddr = freeAddr(t)
	n := mustOpen(t, cfg)
	conn, err := grpc.NewClient(n.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, second := range []*pb.OffloadChunk{{Key: "", Size: 0}, {Key: "", Size: 1, Data: []byte("y")}} {
		st, err := pb.NewKVOffloadClient(conn).BatchOffload(ctx)
		if err != nil {
			t.Fatal(err)
		}
		id := kvoffload.NewTxnID()
		if err := st.Send(&pb.OffloadChunk{TxnId: id[:], Key: keyOf("raw", int(second.Size)), Size: 1, Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if err := st.Send(second); err != nil {
			t.Fatal(err)
		}
		resp, err := st.CloseAndRecv()
		if err != nil {
			t.Fatal(err)
		}
		res := resp.GetResults()
		if len(res) != 2 || res[0].Outcome != pb.Outcome_OUTCOME_STORED || res[1].Outcome != pb.Outcome_OUTCOME_REJECTED {
			t.Fatalf("second object %+v: results %v, want Stored then Rejected", second, res)
		}
	}
}
