// Command pebble drives pebble (github.com/cockroachdb/pebble) with the bench's offload
// workload (workload/bench.Offload, the same code that drives kvoffload): every batch one
// pebble batch committed with pebble.Sync, so it is on the disk when Put returns. It prints
// the bench.Rate as one JSON object. `storenode bench --pebble` builds and runs it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble"

	"github.com/kvoffload/kvoffload/workload/bench"
)

type sink struct{ db *pebble.DB }

func (s sink) Put(_ context.Context, pairs []bench.Pair) (int, error) {
	b := s.db.NewBatch()
	defer b.Close()
	for _, p := range pairs {
		if err := b.Set([]byte(p.Key), p.Value, nil); err != nil {
			return 0, err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, err
	}
	return len(pairs), nil
}

func (s sink) Close() error { return s.db.Close() }

func main() {
	dir := flag.String("dir", "", "data directory (created)")
	var l bench.Load
	flag.IntVar(&l.Keys, "keys", 1024, "keys in all")
	flag.IntVar(&l.Value, "value", 256<<10, "payload bytes per key")
	flag.IntVar(&l.Writers, "writers", 32, "concurrent writers")
	flag.IntVar(&l.Batch, "batch", 16, "keys per batch")
	flag.Uint64Var(&l.Seed, "seed", 1, "payload seed")
	flag.Parse()
	l.Prefix = "pebble"
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "pebble: --dir is required")
		os.Exit(2)
	}
	db, err := pebble.Open(*dir, &pebble.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pebble:", err)
		os.Exit(1)
	}
	s := sink{db}
	r, err := bench.Offload(context.Background(), s, l)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pebble:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}
