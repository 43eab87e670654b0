package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
)

// Load is one offload workload: Keys objects of Value bytes each, offered in batches of Batch
// keys by Writers concurrent writers, each batch a fresh transaction.
type Load struct {
	Prefix  string // key prefix; key i is keyName(Prefix, i)
	Keys    int    // objects in all
	Value   int    // payload bytes per object
	Writers int    // batches in flight
	Batch   int    // keys per batch
	Seed    uint64 // payload bytes
}

// Rate is what one timed run measured. MB is 10^6 bytes.
type Rate struct {
	Keys     int
	Bytes    int64
	Elapsed  time.Duration
	P99      time.Duration // per batch
	MBPerSec float64
	KeysPerS float64
}

func keyName(prefix string, i int) string { return fmt.Sprintf("%s/%09d", prefix, i) }

// keys lists the keys of l, in order.
func (l Load) keys() []string {
	ks := make([]string, l.Keys)
	for i := range ks {
		ks[i] = keyName(l.Prefix, i)
	}
	return ks
}

// payloads returns a few distinct payloads of l.Value random bytes (at most 64 MiB of them),
// made before the timing starts so that payload generation is not what is measured; object i
// carries payload i mod len.
func (l Load) payloads() [][]byte {
	n := max(4, min(64, (64<<20)/max(l.Value, 1)))
	rng := rand.New(rand.NewPCG(l.Seed, uint64(l.Value)))
	ps := make([][]byte, n)
	for i := range ps {
		p := make([]byte, l.Value)
		for j := 0; j+8 <= len(p); j += 8 {
			v := rng.Uint64()
			for b := range 8 {
				p[j+b] = byte(v >> (8 * b))
			}
		}
		ps[i] = p
	}
	return ps
}

// Offload runs l against s and reports its throughput and p99 batch latency. Every object
// must be Stored (fresh keys); anything else is an error.
func Offload(ctx context.Context, s Sink, l Load) (Rate, error) {
	if l.Keys < 1 || l.Writers < 1 || l.Batch < 1 || l.Value < 1 {
		return Rate{}, fmt.Errorf("bench: offload needs keys, writers, batch and value size >= 1, got %d, %d, %d, %d", l.Keys, l.Writers, l.Batch, l.Value)
	}
	pay := l.payloads()
	keys := l.keys()
	batches := (l.Keys + l.Batch - 1) / l.Batch
	stored, el, lats, err := runBatches(ctx, l.Writers, batches, func(ctx context.Context, b int) (int64, error) {
		objs := make([]Pair, 0, l.Batch)
		for i := b * l.Batch; i < min((b+1)*l.Batch, l.Keys); i++ {
			objs = append(objs, Pair{Key: keys[i], Value: pay[i%len(pay)]})
		}
		n, err := s.Put(ctx, objs)
		if err == nil && n != len(objs) {
			err = fmt.Errorf("bench: %d of %d keys of a batch stored (keys not fresh?)", n, len(objs))
		}
		return int64(n), err
	})
	if err != nil {
		return Rate{}, err
	}
	return newRate(int(stored), stored*int64(l.Value), el, lats), nil
}

func newRate(keys int, bytes int64, el time.Duration, lats []time.Duration) Rate {
	r := Rate{Keys: keys, Bytes: bytes, Elapsed: el, P99: p99(lats)}
	if s := el.Seconds(); s > 0 {
		r.MBPerSec = float64(bytes) / 1e6 / s
		r.KeysPerS = float64(keys) / s
	}
	return r
}

// p99 is the nearest-rank 99th percentile of ds (0 when empty).
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	i := (99*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}
