package node_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/node"
)

// Open an embedded single-node store, offload a batch, read it back, and close it.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "kvoffload-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	n, err := node.Open(ctx, node.DefaultConfig(dir))
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	var s kvoffload.Store = n
	res, err := s.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{
		{Key: "llama/0", Value: []byte("block 0")},
		{Key: "", Value: []byte("no key")},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res {
		fmt.Printf("%q %s %s\n", r.Key, r.Outcome, r.Code)
	}
	got, err := s.BatchGet(ctx, []string{"llama/0", "llama/1"})
	if err != nil {
		log.Fatal(err)
	}
	for _, g := range got {
		fmt.Printf("%s %s %q\n", g.Key, g.Status, g.Value)
	}
	// Output:
	// "llama/0" Stored none
	// "" Rejected invalid key
	// llama/0 Found "block 0"
	// llama/1 NotFound ""
}
