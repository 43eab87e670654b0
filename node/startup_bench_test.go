package node

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
)

var (
	startupKeys     = flag.Int("startup-keys", 1<<16, "BenchmarkStartup: committed keys")
	startupSnapshot = flag.Bool("startup-snapshot", false, "BenchmarkStartup: take a Raft snapshot before the close, so the opens restore it instead of replaying the log")
)

// BenchmarkStartup measures what a node holds and spends per committed key when it opens
// (issue 9: <= 300 bytes of memory and <= 5 us of start-up per key). A node commits
// -startup-keys keys of 1 KiB (32 writers x 256, as storenode bench's start-up) and is
// closed without a snapshot, so each open replays the Raft log, rebuilds the FSM, the LRU
// and the extent index, and runs recovery. It reports us/key (the open's wall time) and
// heap_B/key (HeapAlloc after two GCs, after the open minus before it: storenode bench's
// bytes_per_key). storenode bench measures the same after a SIGKILL (workload/bench).
// -startup-snapshot takes a Raft snapshot before the close: the opens then restore it, the
// path of a node whose log passed SnapshotThreshold.
//
//	go test ./node -run '^$' -bench BenchmarkStartup -benchtime 3x -startup-keys 1048576
func BenchmarkStartup(b *testing.B) {
	dir, keys := b.TempDir(), *startupKeys
	cfg := DefaultConfig(dir)
	n, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 1024)
	var wg sync.WaitGroup
	const writers, batch = 32, 256
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo := w * batch; lo < keys; lo += writers * batch {
				objs := make([]kvoffload.Object, 0, batch)
				for i := lo; i < min(lo+batch, keys); i++ {
					objs = append(objs, kvoffload.Object{Key: fmt.Sprintf("startup@%09d", i), Value: value})
				}
				if _, err := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objs); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if *startupSnapshot {
		if err := n.Snapshot(); err != nil {
			b.Fatal(err)
		}
	}
	if err := n.Close(); err != nil {
		b.Fatal(err)
	}
	var open time.Duration
	var heap float64
	b.ResetTimer()
	for b.Loop() {
		h0 := liveHeap()
		t0 := time.Now()
		n, err := Open(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		open += time.Since(t0)
		heap += float64(liveHeap()) - float64(h0)
		if st := n.fsm.Stats(); st.Keys != keys {
			b.Fatalf("%d keys live after the open, want %d", st.Keys, keys)
		}
		if err := n.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(open.Microseconds())/float64(b.N)/float64(keys), "us/key")
	b.ReportMetric(heap/float64(b.N)/float64(keys), "heap_B/key")
}

// liveHeap is HeapAlloc after two GCs (the second returns memory to the OS too), as
// workload/bench measures it.
func liveHeap() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
