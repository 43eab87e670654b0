// Command embedder is the program of embed_test.go's scratch module: it opens an embedded
// kvoffload node in the directory named by its argument and closes it again.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/node"
)

// An embedder that also talks to remote nodes links the client library beside the node.
var _ *client.Client

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: embedder DATADIR")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Open(ctx, node.DefaultConfig(os.Args[1]))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(1)
	}
	if err := n.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		os.Exit(1)
	}
	fmt.Println("embedded node opened and closed")
}
