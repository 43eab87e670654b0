// Command embedder is the program of embed_test.go's scratch module: it opens an embedded
// kvoffload node in the directory named by its argument, with its client API on a loopback
// port, and drives it through the one API twice: embedded, and remotely through the client.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/node"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: embedder DATADIR")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := node.DefaultConfig(os.Args[1])
	cfg.APIAddr = "127.0.0.1:0"
	n, err := node.Open(ctx, cfg)
	check("open", err)
	c, err := client.Dial(ctx, n.APIAddr())
	check("dial", err)
	for i, s := range []kvoffload.Store{n, c} { // the same interface, embedded and remote
		key := fmt.Sprintf("embedder/%d", i)
		res, err := s.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: key, Value: []byte("block")}})
		check("offload", err)
		got, err := s.BatchGet(ctx, []string{key})
		check("get", err)
		fmt.Printf("%T: %s %s %s\n", s, key, res[0].Outcome, got[0].Status)
	}
	check("client close", c.Close())
	check("close", n.Close())
	fmt.Println("embedded node opened and closed")
}

func check(what string, err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, what+":", err)
		os.Exit(1)
	}
}
