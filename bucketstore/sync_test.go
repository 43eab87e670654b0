package bucketstore

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/vfs/errorfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// TestSyncGroupCommit: concurrent Syncs of one bucket share fdatasyncs.
func TestSyncGroupCommit(t *testing.T) {
	slow := func(op errorfs.Op, _ string) error {
		if op == errorfs.OpSync {
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	}
	s := mustOpen(t, memConfig(errorfs.Wrap(memfs.New(), slow)))
	const writers = 32
	ws := make([]written, writers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range writers {
		wg.Go(func() {
			<-start
			ws[i] = mustPut(t, s, "k", uint64(i), 1000)
			if err := s.Sync(ws[i].ext.Bucket); err != nil {
				t.Errorf("Sync: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	syncs := mustStats(t, s).Syncs
	t.Logf("%d concurrent Syncs issued %d fdatasyncs", writers, syncs)
	if syncs == 0 || syncs > writers/4 {
		t.Fatalf("%d fdatasyncs for %d concurrent Syncs: no group commit", syncs, writers)
	}
	for _, w := range ws {
		mustRead(t, s, w)
	}
}

// TestSyncFailureIsSticky: a failed fdatasync is never retried and the bucket is abandoned.
func TestSyncFailureIsSticky(t *testing.T) {
	m := memfs.New()
	s := mustOpen(t, memConfig(errorfs.Wrap(m, errorfs.FailNth(errorfs.OpSync, 1, syscall.EIO))))
	w := mustPut(t, s, "a", 1, 100)
	err := s.Sync(w.ext.Bucket)
	if !errors.Is(err, ErrSyncFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync: %v, want ErrSyncFailed wrapping EIO", err)
	}
	if err := s.Sync(w.ext.Bucket); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("second Sync: %v, want ErrSyncFailed", err)
	}
	if n := mustStats(t, s).Syncs; n != 1 {
		t.Fatalf("%d fdatasyncs: a failed sync was retried", n)
	}
	w2 := mustPut(t, s, "b", 2, 100)
	if w2.ext.Bucket == w.ext.Bucket {
		t.Fatalf("Reserve reused failed bucket %d", w.ext.Bucket)
	}
	if err := s.Sync(w2.ext.Bucket); err != nil {
		t.Fatalf("Sync of the new bucket: %v", err)
	}
	if err := s.Sync(); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Sync of all buckets: %v, want ErrSyncFailed from the failed one", err)
	}
	mustRead(t, s, w2)
}

func TestSyncDirFailureFailsNewBucket(t *testing.T) {
	s := mustOpen(t, memConfig(errorfs.Wrap(memfs.New(), errorfs.FailNth(errorfs.OpSyncDir, 1, syscall.EIO))))
	w := mustPut(t, s, "a", 1, 100)
	if err := s.Sync(w.ext.Bucket); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Sync: %v, want ErrSyncFailed", err)
	}
	w2 := mustPut(t, s, "b", 2, 100)
	if w2.ext.Bucket == w.ext.Bucket {
		t.Fatal("Reserve reused a bucket whose creation was never made durable")
	}
	if err := s.Sync(w2.ext.Bucket); err != nil {
		t.Fatalf("Sync of the new bucket: %v", err)
	}
}

// TestSyncCounts: fdatasync only for buckets with new writes, directory fsync only after a
// creation or removal.
func TestSyncCounts(t *testing.T) {
	var dirSyncs atomic.Int64
	count := func(op errorfs.Op, _ string) error {
		if op == errorfs.OpSyncDir {
			dirSyncs.Add(1)
		}
		return nil
	}
	s := mustOpen(t, memConfig(errorfs.Wrap(memfs.New(), count)))
	w := mustPut(t, s, "a", 1, 100)
	for range 3 {
		if err := s.Sync(w.ext.Bucket); err != nil {
			t.Fatal(err)
		}
	}
	if st := mustStats(t, s); st.Syncs != 1 || dirSyncs.Load() != 1 {
		t.Fatalf("%d fdatasyncs and %d dir syncs, want 1 and 1", st.Syncs, dirSyncs.Load())
	}
	if err := s.Sync(w.ext.Bucket + 1); err == nil {
		t.Fatal("Sync of a bucket that never existed succeeded")
	}
}
