package node

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// The client API's token check reads the scheme of "authorization" case-insensitively, as
// HTTP authentication schemes are (RFC 7235 §2.1), and still refuses a wrong token, a
// missing space, another scheme and no header.
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.APIAddr = "127.0.0.1:0"
	cfg.Security.APITokens = []string{"s3cret"}
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	cc, err := grpc.NewClient(n.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	kv := pb.NewKVOffloadClient(cc)
	for _, c := range []struct {
		header string
		ok     bool
	}{{"Bearer s3cret", true}, {"bearer s3cret", true}, {"BEARER s3cret", true},
		{"Bearer wrong", false}, {"Bearers3cret", false}, {"Basic s3cret", false}, {"", false}} {
		ctx := context.Background()
		if c.header != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", c.header)
		}
		_, err := kv.Stats(ctx, &pb.StatsRequest{})
		if c.ok && err != nil {
			t.Errorf("%q: %v, want accepted", c.header, err)
		}
		if !c.ok && status.Code(err) != codes.Unauthenticated {
			t.Errorf("%q: %v, want Unauthenticated", c.header, err)
		}
	}
}
