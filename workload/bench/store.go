package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/node"
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

// localStore is a node with a local socket and a client on it (the shared-memory path,
// docs/design.md "The local path"), both in this process.
type localStore struct {
	n   *node.Node
	c   *client.Client
	dir string // holds the socket (a short path: sun_path holds 107 bytes)
}

// openLocalStore opens a node in dir with a local socket and dials it at unix://.
func openLocalStore(ctx context.Context, dir string) (*localStore, error) {
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
	c, err := client.Dial(ctx, "unix://"+cfg.Local.Socket)
	if err != nil {
		_ = n.Close()
		_ = os.RemoveAll(sock)
		return nil, err
	}
	return &localStore{n: n, c: c, dir: sock}, nil
}

func (s *localStore) Put(ctx context.Context, objs []Pair) (int, error) {
	return (&kvStore{s: s.c}).Put(ctx, objs)
}

func (s *localStore) get(ctx context.Context, keys []string) (int64, error) {
	return (&kvStore{s: s.c}).get(ctx, keys)
}

func (s *localStore) Close() error {
	err := errors.Join(s.c.Close(), s.n.Close())
	_ = os.RemoveAll(s.dir)
	return err
}
