package txn

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/txn/txntest"
	"github.com/kvoffload/kvoffload/vfs/errorfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// TestTransientFlipRereads: a record read with a bit flipped on its way to memory, its disk
// bytes whole, is read again before anything is decided: the key is Found with its bytes and
// stays in the metadata. A flip on every read of it is damage: Corrupt, and the key removed.
func TestTransientFlipRereads(t *testing.T) {
	var flips atomic.Int64 // reads of a bucket file still to flip
	hooks := errorfs.Hooks{Read: func(name string, p []byte, _ int64, n int, err error) (int, error) {
		if err == nil && n > 0 && strings.HasPrefix(name, "/b/") && flips.Add(-1) >= 0 {
			p[n/2] ^= 0x10
		}
		return n, err
	}}
	cfg := bucketstore.DefaultConfig("/b")
	cfg.FS = errorfs.WrapHooks(memfs.New(), func(errorfs.Op, string) error { return nil }, hooks)
	m := txntest.NewMeta()
	c, _ := openCoordinator(t, m, m.FSM, cfg)
	ctx := context.Background()
	value := bytes.Repeat([]byte("kv"), 4096)
	res, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), []kvoffload.Object{{Key: "k", Value: value}, {Key: "bad", Value: value}})
	if err != nil || res[0].Outcome != kvoffload.Stored || res[1].Outcome != kvoffload.Stored {
		t.Fatalf("offload: %v %+v", err, res)
	}

	flips.Store(1)
	got, err := c.BatchGet(ctx, []string{"k"})
	if err != nil || got[0].Status != kvoffload.Found || !bytes.Equal(got[0].Value, value) {
		t.Fatalf("a read with one transient flip: %v %+v", err, got)
	}
	if flips.Load() >= 0 {
		t.Fatal("the read was not flipped: the test injected nothing")
	}
	if _, ok := m.FSM.Lookup("k"); !ok {
		t.Fatal("a key whose read was flipped once was removed from the metadata")
	}

	flips.Store(1 << 30)
	got, err = c.BatchGet(ctx, []string{"bad"})
	if err != nil || got[0].Status != kvoffload.Corrupt {
		t.Fatalf("a read flipped every time: %v %+v, want Corrupt", err, got)
	}
	if _, ok := m.FSM.Lookup("bad"); ok {
		t.Fatal("a key whose record fails every read is still in the metadata")
	}
}
