package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/node"
	"github.com/kvoffload/kvoffload/workload/replay"
)

// This file is the only one of the package that calls the store's Go API (node.Open,
// BatchOffload, BatchGet, Close, txn IDs and objects): when that API moves, only this file
// changes. Everything else sees the small interfaces below.

// Pair is one key and its payload, as the bench hands it to a Sink.
type Pair struct {
	Key   string
	Value []byte
}

// Sink is what an offload run drives: kvoffload, or a peer (peers.go; the pebble driver in
// the separate module bench/ implements it too, so that every store gets the same workload).
type Sink interface {
	// Put stores pairs durably (on the disk when it returns) as one batch and reports how many
	// were newly stored.
	Put(ctx context.Context, pairs []Pair) (stored int, err error)
	Close() error
}

// source is what a read run drives: it returns the payload bytes read for keys, and an
// error naming the first key that was not found whole.
type source interface {
	get(ctx context.Context, keys []string) (bytes int64, err error)
}

// kvStore is an embedded kvoffload node (s is the node; any kvoffload.Store would do: the
// client drives a storenode the same way, localStore).
type kvStore struct {
	n *node.Node
	s kvoffload.Store
}

// openStore opens an embedded node in dir (created if missing).
func openStore(ctx context.Context, dir string) (*kvStore, error) {
	n, err := node.Open(ctx, node.DefaultConfig(dir))
	if err != nil {
		return nil, err
	}
	return &kvStore{n: n, s: n}, nil
}

func (s *kvStore) Put(ctx context.Context, objs []Pair) (int, error) {
	in := make([]kvoffload.Object, len(objs))
	for i, o := range objs {
		in[i] = kvoffload.Object{Key: o.Key, Value: o.Value}
	}
	res, err := s.s.BatchOffload(ctx, kvoffload.NewTxnID(), in)
	if err != nil {
		return 0, err
	}
	stored := 0
	for _, r := range res {
		if r.Outcome == kvoffload.Stored {
			stored++
		} else if !r.Outcome.OK() {
			return stored, fmt.Errorf("offload of %s: %s %s", r.Key, r.Outcome, r.Reason)
		}
	}
	return stored, nil
}

func (s *kvStore) get(ctx context.Context, keys []string) (int64, error) {
	res, err := s.s.BatchGet(ctx, keys)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, r := range res {
		if r.Status != kvoffload.Found {
			return n, fmt.Errorf("get of %s: %s %s", r.Key, r.Status, r.Reason)
		}
		n += int64(len(r.Value))
	}
	return n, nil
}

func (s *kvStore) Close() error { return s.n.Close() }

// target is the node as a replay drives it (workload/replay).
func (s *kvStore) target() replay.Target { return s.s }

// servedNode is a node served in this process for a client in another (served.go): on its
// local socket (the shared-memory path, docs/design.md "The local path"), or with its API on
// loopback TCP (the gRPC stream path). addr is what the client dials.
type servedNode struct {
	n    *node.Node
	addr string
	sock string // the local socket's directory (a short path: sun_path holds 107 bytes); "" on TCP
}

// serveLocal opens a node in dir with a local socket, dialed at unix://.
func serveLocal(ctx context.Context, dir string) (*servedNode, error) {
	sock, err := os.MkdirTemp("", "kvb")
	if err != nil {
		return nil, err
	}
	cfg := node.DefaultConfig(dir)
	cfg.Local.Socket = filepath.Join(sock, "s")
	n, err := node.Open(ctx, cfg)
	if err != nil {
		_ = os.RemoveAll(sock)
		return nil, err
	}
	return &servedNode{n: n, addr: "unix://" + cfg.Local.Socket, sock: sock}, nil
}

// serveStream opens a node in dir with its API on a loopback port.
func serveStream(ctx context.Context, dir string) (*servedNode, error) {
	cfg := node.DefaultConfig(dir)
	cfg.APIAddr = "127.0.0.1:0"
	n, err := node.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &servedNode{n: n, addr: n.APIAddr()}, nil
}

func (s *servedNode) Close() error {
	err := s.n.Close()
	if s.sock != "" {
		_ = os.RemoveAll(s.sock)
	}
	return err
}

// clientStore is a client of a served node: the served-path child's Sink and source.
type clientStore struct{ c *client.Client }

func dialStore(ctx context.Context, addr string) (*clientStore, error) {
	c, err := client.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &clientStore{c: c}, nil
}

func (s *clientStore) Put(ctx context.Context, objs []Pair) (int, error) {
	return (&kvStore{s: s.c}).Put(ctx, objs)
}

func (s *clientStore) get(ctx context.Context, keys []string) (int64, error) {
	return (&kvStore{s: s.c}).get(ctx, keys)
}

func (s *clientStore) Close() error { return s.c.Close() }

// target is the client as a replay drives it, as `storenode replay --addr` does.
func (s *clientStore) target() replay.Target { return s.c }
