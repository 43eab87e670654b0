package kvoffload_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fake"
)

// offloadBlocks stores a request's KV blocks as one transaction and says which keys to keep
// in the GPU tier: the ones the store could not take. It takes any Store: the embedded node,
// the client of a cluster, or (here) the fake.
func offloadBlocks(ctx context.Context, s kvoffload.Store, blocks []kvoffload.Object) (keep []string, err error) {
	res, err := s.BatchOffload(ctx, kvoffload.NewTxnID(), blocks)
	if err != nil {
		return nil, err // ErrIndeterminate: call again with the same TxnID to learn the outcome
	}
	for _, r := range res {
		switch err := r.Err(); {
		case err == nil: // Stored or AlreadyStored
		case errors.Is(err, kvoffload.CodeQuota):
			keep = append(keep, r.Key) // the store is full
		default:
			return nil, err
		}
	}
	return keep, nil
}

// Offload blocks through the one API, find the cached prefix, and read it into buffers the
// caller owns.
func Example() {
	ctx := context.Background()
	s := fake.New(fake.Options{CapacityBytes: 14})
	keep, err := offloadBlocks(ctx, s, []kvoffload.Object{
		{Key: "model/req1/0", Value: []byte("block 0")},
		{Key: "model/req1/1", Value: []byte("block 1")},
		{Key: "model/req1/2", Value: []byte("block 2")}, // over the fake's 14-byte capacity
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("kept on the GPU:", keep)

	keys := []string{"model/req1/0", "model/req1/1", "model/req1/2"}
	ex, err := s.BatchExists(ctx, keys, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("prefix hit:", ex.PrefixPresent, "blocks")

	bufs := [][]byte{make([]byte, 16), make([]byte, 4)}
	got, err := s.BatchGetInto(ctx, keys[:ex.PrefixPresent], bufs)
	if err != nil {
		log.Fatal(err)
	}
	for _, g := range got {
		fmt.Printf("%s %s %q (size %d)\n", g.Key, g.Status, g.Value, g.Size)
	}
	// Output:
	// kept on the GPU: [model/req1/2]
	// prefix hit: 2 blocks
	// model/req1/0 Found "block 0" (size 7)
	// model/req1/1 ShortBuffer "" (size 7)
}
