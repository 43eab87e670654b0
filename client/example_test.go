package client_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/node"
)

// serveNode runs a single-node store in this process with its client API on a free loopback
// port, as `storenode serve` would, and returns the API address and a stop function.
func serveNode() (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "kvoffload-example-")
	if err != nil {
		log.Fatal(err)
	}
	cfg := node.DefaultConfig(dir)
	cfg.APIAddr = "127.0.0.1:0"
	n, err := node.Open(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	return n.APIAddr(), func() { n.Close(); os.RemoveAll(dir) }
}

// Offload two blocks as one transaction, check the prefix, and read them back. The member here
// is a single node served in this process (serveNode); against a cluster, pass the members'
// API addresses to Dial.
func Example() {
	addr, stop := serveNode()
	defer stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, addr) // more addresses: failover targets
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{
		{Key: "llama/0", Value: []byte("block 0")},
		{Key: "llama/1", Value: []byte("block 1")},
	})
	if err != nil {
		log.Fatal(err) // the outcome of every key is unknown only when err != nil
	}
	for _, r := range res {
		fmt.Println(r.Key, r.Outcome)
	}

	ex, err := c.BatchExists(ctx, []string{"llama/0", "llama/1", "llama/2"}, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("prefix hit:", ex.PrefixPresent, "blocks")

	got, err := c.BatchGet(ctx, []string{"llama/1", "llama/2"})
	if err != nil {
		log.Fatal(err)
	}
	for _, g := range got {
		fmt.Printf("%s %s %q\n", g.Key, g.Status, g.Value)
	}
	// Output:
	// llama/0 Stored
	// llama/1 Stored
	// prefix hit: 2 blocks
	// llama/1 Found "block 1"
	// llama/2 NotFound ""
}

// An explicit transaction: stage with Put, send with Commit (or discard with Abort).
func ExampleTxn() {
	addr, stop := serveNode()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	tx := c.Begin()
	_ = tx.Put("m/a", []byte("A"))
	_ = tx.Put("m/b", []byte("B"))
	res, err := tx.Commit(ctx) // one BatchOffload named tx.ID(); retried exactly-once
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res[0].Outcome, res[1].Outcome)

	discard := c.Begin()
	_ = discard.Put("m/c", []byte("C"))
	discard.Abort() // nothing was sent
	fmt.Println(discard.Put("m/d", nil))
	// Output:
	// Stored Stored
	// client: transaction already committed or aborted: put "m/d"
}
