package txn

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn/txntest"
	"github.com/kvoffload/kvoffload/vfs"
)

// damageOnDisk overwrites two bytes of e's record (200 bytes in) in its bucket file under dir.
func damageOnDisk(t *testing.T, dir string, e fsm.Entry) {
	t.Helper()
	fh, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("bucket-%010d.kvb", e.Extent.Bucket)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt([]byte{0xff, 0xfe}, e.Extent.Offset+200); err != nil {
		t.Fatal(err)
	}
}

// TestReadsOnTheRealFilesystem runs the read fan-out on OSFS, where bucketstore.ReadBatch
// takes the native AIO path (the other txn tests run on memfs): two records damaged on disk
// come back Corrupt and are removed from the metadata by the time the call returns, every
// other key comes back Found, a batch cancelled partway visits every position once, and no
// pin outlives a call.
func TestReadsOnTheRealFilesystem(t *testing.T) {
	f := fsm.New()
	dir := t.TempDir()
	cfg := bucketstore.DefaultConfig(dir)
	cfg.FS = vfs.OSFS{DirectIO: true}
	c, _ := openCoordinator(t, &txntest.Meta{FSM: f}, f, cfg)
	var keys []string
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("k%03d", i))
	}
	offloadNamed(t, c, keys...)
	damaged := map[string]bool{"k010": true, "k100": true}
	for k := range damaged {
		e, _ := f.Lookup(k)
		damageOnDisk(t, dir, e)
	}
	pins := func() int {
		c.reclaim.mu.Lock()
		defer c.reclaim.mu.Unlock()
		return len(c.reclaim.pins)
	}
	out, err := c.BatchGet(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range out {
		if want := map[bool]kvoffload.GetStatus{false: kvoffload.Found, true: kvoffload.Corrupt}[damaged[keys[i]]]; r.Status != want {
			t.Errorf("%s: %s (%s), want %s", keys[i], r.Status, r.Reason, want)
		}
	}
	for k := range damaged {
		if _, ok := f.Lookup(k); ok {
			t.Errorf("%s was answered Corrupt but is still in the metadata after the call", k)
		}
	}
	if n := pins(); n != 0 {
		t.Errorf("%d pins left after BatchGet", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	visits := make([]int, len(keys))
	seen := 0
	if err := c.BatchGetEach(ctx, keys, nil, func(i int, r kvoffload.GetResult) bool {
		visits[i]++
		if seen++; seen == 120 {
			cancel()
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	for i, v := range visits {
		if v != 1 {
			t.Errorf("position %d visited %d times", i, v)
		}
	}
	if n := pins(); n != 0 {
		t.Errorf("%d pins left after a cancelled BatchGetEach", n)
	}
	if _, err := c.BatchGetLocal(context.Background(), keys, nil); err != nil {
		t.Fatal(err)
	}
	if n := pins(); n != 0 {
		t.Errorf("%d pins left after BatchGetLocal", n)
	}
}
