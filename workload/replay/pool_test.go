package replay

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// copyTarget stores copies of the values, as a real store does, and reads into buffers.
type copyTarget struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (t *copyTarget) BatchOffload(_ context.Context, _ fsm.TxnID, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]kvoffload.KeyResult, len(objs))
	for i, o := range objs {
		t.m[o.Key] = append([]byte(nil), o.Value...)
		out[i] = kvoffload.KeyResult{Key: o.Key, Outcome: kvoffload.Stored}
	}
	return out, nil
}

func (t *copyTarget) BatchGet(ctx context.Context, keys []string) ([]kvoffload.GetResult, error) {
	bufs := make([][]byte, len(keys))
	for i := range bufs {
		bufs[i] = make([]byte, 1<<20)
	}
	return t.BatchGetInto(ctx, keys, bufs)
}

func (t *copyTarget) BatchGetInto(_ context.Context, keys []string, bufs [][]byte) ([]kvoffload.GetResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]kvoffload.GetResult, len(keys))
	for i, k := range keys {
		v, ok := t.m[k]
		if !ok {
			out[i] = kvoffload.GetResult{Key: k, Status: kvoffload.NotFound}
			continue
		}
		out[i] = kvoffload.GetResult{Key: k, Status: kvoffload.Found, Value: bufs[i][:copy(bufs[i], v)]}
	}
	return out, nil
}

// TestPoolReusesSlots: a replay whose payloads live in a Pool smaller than the trace reuses
// its slots (each value written before the slot is taken again) and verifies every key, read
// into the pool's slots; every slot is free at the end.
func TestPoolReusesSlots(t *testing.T) {
	var reqs []trace.Request
	for i := range 40 {
		reqs = append(reqs, trace.Request{HashIDs: []int64{int64(3 * i), int64(3*i + 1), int64(3*i + 2)}})
	}
	const block = 256
	opt := Options{Writers: 4, BlockSize: block, Model: "m", ReadBatch: 8, Readers: 2, Ahead: 4 * block}
	size := PoolBytes(reqs, opt)
	if want := int64(min(120, 4+4*3, 120)) * block; size < want || size >= 120*block {
		t.Fatalf("PoolBytes = %d, want at least %d and less than the whole trace (%d)", size, want, 120*block)
	}
	pool, err := NewPool(make([]byte, size), block)
	if err != nil {
		t.Fatal(err)
	}
	opt.Pool = pool
	tg := &copyTarget{m: map[string][]byte{}}
	s, err := Run(context.Background(), tg, reqs, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Verified || s.Missing != 0 || s.Corrupt != 0 || s.Stored != 120 {
		t.Fatalf("summary %+v, want 120 keys stored and verified", s)
	}
	if len(pool.free) != cap(pool.free) {
		t.Fatalf("%d of %d slots free after the replay", len(pool.free), cap(pool.free))
	}
}

// TestPoolRefused: a pool the replay cannot run on is refused, naming why.
func TestPoolRefused(t *testing.T) {
	reqs := []trace.Request{{HashIDs: []int64{1, 2, 3}}}
	small, _ := NewPool(make([]byte, 2*64), 64)
	other, _ := NewPool(make([]byte, 8*32), 32)
	for _, c := range []struct {
		pool *Pool
		tg   Target
		want string
	}{
		{small, &copyTarget{m: map[string][]byte{}}, "fewer than the 3"},
		{other, &copyTarget{m: map[string][]byte{}}, "slots are 32 bytes"},
		{small, &memTarget{m: map[string][]byte{}}, "BatchGetInto"},
	} {
		_, err := Run(context.Background(), c.tg, reqs, Options{Writers: 1, BlockSize: 64, Model: "m", ReadBatch: 1, Pool: c.pool})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one naming %q", err, c.want)
		}
	}
	if _, err := NewPool(make([]byte, 10), 64); err == nil {
		t.Error("a pool with no slot was accepted")
	}
}
