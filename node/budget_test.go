package node

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// budgetNode is a node on a fresh API address whose buffer budget and batch limit are both
// 16 MiB, and a raw gRPC client of it (no retries: a stream is what the test makes of it).
func budgetNode(t *testing.T) (*Node, pb.KVOffloadClient) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.APIAddr = freeAddr(t)
	cfg.Txn.MaxBatchBytes, cfg.Txn.MaxBufferedBytes = 16<<20, 16<<20
	cfg.Registry = prometheus.NewRegistry()
	n := mustOpen(t, cfg)
	t.Cleanup(func() { mustClose(t, n) })
	conn, err := grpc.NewClient(n.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return n, pb.NewKVOffloadClient(conn)
}

// readStream reads a BatchGet stream to its end and returns the value bytes it carried.
func readStream(t *testing.T, st grpc.ServerStreamingClient[pb.GetChunk]) int {
	t.Helper()
	got := 0
	for {
		ch, err := st.Recv()
		if err != nil {
			return got
		}
		got += len(ch.Data)
	}
}

// TestBufferBudgetStalledReaders: two BatchGet streams of 16 keys of 1 MiB that never read
// their responses hold no more than MaxBufferedBytes together (unbounded, two such streams
// of a 64 MiB key would take a server from 340 MiB to 2.1 GiB). The second waits for the
// budget (counted), and is served once the first goes away.
func TestBufferBudgetStalledReaders(t *testing.T) {
	const size = 1 << 20
	n, cl := budgetNode(t)
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = keyOf("budget", i)
	}
	mustOffload(t, n, objects(3, size, keys...))
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	if _, err := cl.BatchGet(ctx1, &pb.GetRequest{Keys: keys}); err != nil { // never read
		t.Fatal(err)
	}
	m := n.metrics
	testkit.Eventually(t, 10*time.Second, "the first stream to hold its bytes", func() bool { return metricValue(t, m.bufferedBytes) == 16*size })
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	st2, err := cl.BatchGet(ctx2, &pb.GetRequest{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the second stream to wait", func() bool { return metricValue(t, m.bufferWaits) >= 1 })
	time.Sleep(100 * time.Millisecond)
	if got := metricValue(t, m.bufferedBytes); got > 16*size {
		t.Fatalf("%v bytes buffered, over MaxBufferedBytes %d", got, 16*size)
	}
	cancel1()
	if got := readStream(t, st2); got != 16*size {
		t.Fatalf("second stream: %d bytes, want %d", got, 16*size)
	}
	testkit.Eventually(t, 10*time.Second, "every byte released", func() bool { return metricValue(t, m.bufferedBytes) == 0 })
	checkReadable(t, n, 3, size, keys...)
}

// TestBufferBudgetRepeatedKeyCountsOnce: a stream naming one 1 MiB key 16 times holds its
// bytes once, as the node does (reserving per position would let two streams of 16
// positions of a 64 MiB key take a 2 GiB budget for 64 MiB read), and still sends the value
// at every position.
func TestBufferBudgetRepeatedKeyCountsOnce(t *testing.T) {
	const size = 1 << 20
	n, cl := budgetNode(t)
	key := keyOf("repeated", 0)
	mustOffload(t, n, objects(3, size, key))
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = key
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := cl.BatchGet(ctx, &pb.GetRequest{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	m := n.metrics
	testkit.Eventually(t, 10*time.Second, "the stream to hold its bytes", func() bool { return metricValue(t, m.bufferedBytes) > 0 })
	if got := metricValue(t, m.bufferedBytes); got != size {
		t.Fatalf("16 positions of one %d-byte key hold %v bytes of the budget, want %d", size, got, size)
	}
	if got := readStream(t, st); got != 16*size {
		t.Fatalf("stream: %d bytes, want %d", got, 16*size)
	}
}

// TestBufferBudgetSizedByTheReadsLookup: a BatchGet reserves its budget from the metadata
// lookup its reads use, so keys stored while it waits for the budget are not read uncounted
// (sized from a lookup of its own, the hold would miss keys stored after it, and the reads
// would take the budget past MaxBufferedBytes). Stream A holds the whole budget; B waits,
// and its 15 keys are stored meanwhile; B then answers them as its lookup found them
// (absent), and the budget never goes over its limit.
func TestBufferBudgetSizedByTheReadsLookup(t *testing.T) {
	const size = 1 << 20
	n, cl := budgetNode(t)
	ka := make([]string, 16)
	for i := range ka {
		ka[i] = keyOf("a", i)
	}
	mustOffload(t, n, objects(3, size, ka...))
	small := keyOf("small", 0)
	mustOffload(t, n, objects(3, 1, small))
	m := n.metrics
	var peak atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			peak.Store(max(peak.Load(), int64(metricValue(t, m.bufferedBytes))))
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	if _, err := cl.BatchGet(ctxA, &pb.GetRequest{Keys: ka}); err != nil { // never read
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "A to hold the budget", func() bool { return metricValue(t, m.bufferedBytes) == 16*size })
	later := make([]string, 15)
	for i := range later {
		later[i] = keyOf("later", i)
	}
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	stB, err := cl.BatchGet(ctxB, &pb.GetRequest{Keys: append([]string{small}, later...)})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "B to wait", func() bool { return metricValue(t, m.bufferWaits) >= 1 })
	mustOffload(t, n, objects(4, size, later...))
	cancelA()
	var found, absent int
	for {
		ch, err := stB.Recv()
		if err != nil {
			break
		}
		switch ch.Status {
		case pb.GetStatus_GET_STATUS_FOUND:
			found++
		case pb.GetStatus_GET_STATUS_NOT_FOUND:
			absent++
		}
	}
	if found != 1 || absent != 15 {
		t.Fatalf("B: %d found, %d not found; want its one key found and the 15 stored after its lookup absent", found, absent)
	}
	if p := peak.Load(); p > 16*size {
		t.Fatalf("the budget held %d bytes, over MaxBufferedBytes %d", p, 16*size)
	}
}

// TestIdleReaderLosesItsStream: a BatchGet stream whose client takes nothing is ended after
// the idle limit, and its share of the budget released: otherwise a reader that never reads
// holds the whole budget for as long as it stays connected, and everyone else's reads and
// writes wait out their deadlines.
func TestIdleReaderLosesItsStream(t *testing.T) {
	const size = 1 << 20
	n, cl := budgetNode(t)
	n.idleLimit.Store(int64(300 * time.Millisecond))
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = keyOf("idle", i)
	}
	mustOffload(t, n, objects(3, size, keys...))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := cl.BatchGet(ctx, &pb.GetRequest{Keys: keys}) // not read until the end
	if err != nil {
		t.Fatal(err)
	}
	m := n.metrics
	testkit.Eventually(t, 10*time.Second, "the stream to hold its bytes", func() bool { return metricValue(t, m.bufferedBytes) == 16*size })
	testkit.Eventually(t, 10*time.Second, "the idle stream's bytes to be released", func() bool { return metricValue(t, m.bufferedBytes) == 0 })
	readStream(t, st)
	if _, err := st.Recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("the idle stream ended with %v, want DeadlineExceeded", err)
	}
	checkReadable(t, n, 3, size, keys...)
}

// metricValue is the value of a counter or gauge.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}

// TestIdleOffloadStreamEnds: an offload stream that announces an object, sends one byte and
// then nothing is ended by the server with DeadlineExceeded after the idle limit, and the
// budget it held is released (a few thousand such streams would otherwise hold all of it);
// a first byte reserves a small buffer, not the announced size.
func TestIdleOffloadStreamEnds(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.APIAddr = freeAddr(t)
	cfg.Registry = prometheus.NewRegistry()
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	n.idleLimit.Store(int64(300 * time.Millisecond))
	conn, err := grpc.NewClient(n.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := pb.NewKVOffloadClient(conn).BatchOffload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := kvoffload.NewTxnID()
	if err := st.Send(&pb.OffloadChunk{TxnId: id[:], Key: keyOf("idle", 0), Size: 4 << 20, Data: []byte{1}}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the stream to hold its first buffer", func() bool { return metricValue(t, n.metrics.bufferedBytes) > 0 })
	if held := metricValue(t, n.metrics.bufferedBytes); held > float64(firstValueBytes) {
		t.Fatalf("one byte of a 4 MiB object holds %v bytes of the budget, want at most %d", held, firstValueBytes)
	}
	// The client sends nothing more and does not close: the server ends the stream.
	testkit.Eventually(t, 10*time.Second, "the budget released by the idle limit", func() bool { return metricValue(t, n.metrics.bufferedBytes) == 0 })
	if _, err := st.CloseAndRecv(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("the idle stream ended with %v, want DeadlineExceeded", err)
	}
}
