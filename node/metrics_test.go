package node

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
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
	"github.com/kvoffload/kvoffload/internal/wire"
)

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// apiNode opens an embedded node serving the gRPC API, with a registry and a captured log.
func apiNode(t *testing.T, tune func(*Config)) (*Node, *prometheus.Registry, *syncBuffer, pb.KVOffloadClient) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.APIAddr = freeAddr(t)
	reg := prometheus.NewRegistry()
	logs := &syncBuffer{}
	cfg.Registry, cfg.Logger = reg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if tune != nil {
		tune(&cfg)
	}
	n := mustOpen(t, cfg)
	t.Cleanup(func() { _ = n.Close() })
	conn, err := grpc.NewClient(n.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return n, reg, logs, pb.NewKVOffloadClient(conn)
}

// series returns every series of family name, by its labels rendered as "k=v,k=v".
func series(t *testing.T, reg *prometheus.Registry, name string) map[string]*dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Metric{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.Metric {
			var ls []string
			for _, l := range m.Label {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(ls, ",")] = m
		}
	}
	return out
}

// TestMetricsAtStartUp: every outcome series exists at zero before any request, label values
// are snake_case, BatchGet has a latency histogram, and the buffer gauge and wait counter
// exist.
func TestMetricsAtStartUp(t *testing.T) {
	_, reg, _, _ := apiNode(t, nil)
	want := map[string][]string{
		"kvoffload_offload_keys_total": {"outcome=stored", "outcome=already_stored", "outcome=conflict", "outcome=rejected", "outcome=failed"},
		"kvoffload_get_keys_total":     {"status=found", "status=not_found", "status=corrupt", "status=unavailable"},
		"kvoffload_exists_keys_total":  {"presence=present", "presence=absent", "presence=in_flight", "presence=unknown"},
		"kvoffload_key_failures_total": {
			"op=offload,outcome=conflict,reason=different_bytes", "op=offload,outcome=rejected,reason=too_large",
			"op=offload,outcome=rejected,reason=other", "op=offload,outcome=failed,reason=write_error",
			"op=offload,outcome=failed,reason=indeterminate", "op=get,outcome=corrupt,reason=corrupt_record",
			"op=get,outcome=unavailable,reason=read_index_failed", "op=get,outcome=unavailable,reason=other",
		},
		"kvoffload_buffered_bytes":          {""},
		"kvoffload_buffer_waits_total":      {""},
		"kvoffload_peer_buffered_bytes":     {""},
		"kvoffload_peer_buffer_waits_total": {""},
	}
	for name, labels := range want {
		got := series(t, reg, name)
		for _, l := range labels {
			m, ok := got[l]
			if !ok {
				t.Errorf("%s{%s} missing at start-up (have %d series)", name, l, len(got))
				continue
			}
			if v := m.GetCounter().GetValue() + m.GetGauge().GetValue(); v != 0 {
				t.Errorf("%s{%s} = %v at start-up", name, l, v)
			}
		}
	}
	failures := series(t, reg, "kvoffload_key_failures_total")
	n := 0
	for _, fk := range failureKinds {
		n += len(fk.classes) + 1
	}
	if len(failures) != n {
		t.Errorf("kvoffload_key_failures_total has %d series, want %d (every combination)", len(failures), n)
	}
	for l := range failures {
		if l != strings.ToLower(l) || strings.ContainsAny(l, " -") {
			t.Errorf("label values not snake_case: %s", l)
		}
	}
	if len(series(t, reg, "kvoffload_get_batch_seconds")) != 1 {
		t.Error("kvoffload_get_batch_seconds missing")
	}
}

// offloadRaw sends objs as one BatchOffload stream under id; a value of nil with size set
// announces size bytes and sends them in 1 MiB chunks of 'x'.
func offloadRaw(ctx context.Context, cl pb.KVOffloadClient, id [16]byte, keys []string, sizes []int) (*pb.OffloadResponse, error) {
	st, err := cl.BatchOffload(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&pb.OffloadChunk{TxnId: id[:]}); err != nil {
		return nil, err
	}
	for i, k := range keys {
		if err := st.Send(&pb.OffloadChunk{Key: k, Size: uint64(sizes[i])}); err != nil {
			break // the server refused: its status comes with CloseAndRecv
		}
		for left := sizes[i]; left > 0; left -= wire.ChunkBytes {
			if err := st.Send(&pb.OffloadChunk{Data: bytes.Repeat([]byte{'x'}, min(left, wire.ChunkBytes))}); err != nil {
				break
			}
		}
	}
	return st.CloseAndRecv()
}

// TestKeyFailuresCountedAndLogged: a Conflict and a Rejected key are counted under their
// reason class and logged with txn, key, outcome and reason, so that the operator sees them
// too, not only the calling client.
func TestKeyFailuresCountedAndLogged(t *testing.T) {
	_, reg, logs, cl := apiNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := keyOf("fail", 0)
	if _, err := offloadRaw(ctx, cl, kvoffload.NewTxnID(), []string{key}, []int{10}); err != nil {
		t.Fatal(err)
	}
	id := kvoffload.NewTxnID()
	resp, err := offloadRaw(ctx, cl, id, []string{key, "bad\x01key"}, []int{11, 1})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Results[0].Outcome != pb.Outcome_OUTCOME_CONFLICT || resp.Results[1].Outcome != pb.Outcome_OUTCOME_REJECTED {
		t.Fatalf("results %v", resp.Results)
	}
	f := series(t, reg, "kvoffload_key_failures_total")
	if v := f["op=offload,outcome=conflict,reason=different_bytes"].GetCounter().GetValue(); v != 1 {
		t.Errorf("conflict counted %v times", v)
	}
	if v := f["op=offload,outcome=rejected,reason=invalid_key"].GetCounter().GetValue(); v != 1 {
		t.Errorf("invalid key counted %v times", v)
	}
	if v := series(t, reg, "kvoffload_offload_keys_total")["outcome=conflict"].GetCounter().GetValue(); v != 1 {
		t.Errorf("offload_keys_total{conflict} = %v", v)
	}
	out := logs.String()
	for _, want := range []string{"txn=" + id.String(), "key=" + key, "outcome=conflict", "reason=\"committed with different bytes\"", "outcome=rejected", "reason_class=invalid_key"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	if _, err := cl.BatchGet(ctx, &pb.GetRequest{Keys: []string{key}}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the BatchGet latency observed", func() bool {
		return series(t, reg, "kvoffload_get_batch_seconds")[""].GetHistogram().GetSampleCount() == 1
	})
}

// TestRefusalsNameTheLimit: request-level refusals over gRPC name the limit, its value, the
// size and the key, not a bare `ResourceExhausted "txn: batch too large"`; an object over
// MaxObjectBytes is Rejected with its size and the limit.
func TestRefusalsNameTheLimit(t *testing.T) {
	_, _, _, cl := apiNode(t, func(cfg *Config) {
		cfg.Txn.MaxBatchKeys, cfg.Txn.MaxObjectBytes, cfg.Txn.MaxBatchBytes = 3, 1<<20, 4<<20
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := []string{keyOf("lim", 0), keyOf("lim", 1), keyOf("lim", 2), keyOf("lim", 3)}
	_, err := offloadRaw(ctx, cl, kvoffload.NewTxnID(), keys, []int{1, 1, 1, 1})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `batch of 4 keys at key "`+keys[3]+`" exceeds MaxBatchKeys 3`) {
		t.Errorf("4 keys: %v", err)
	}
	_, err = offloadRaw(ctx, cl, kvoffload.NewTxnID(), keys[:2], []int{1 << 20, 4<<30 + 4097 - 1<<20})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `batch of 4294971393 bytes at key "`+keys[1]+`" exceeds MaxBatchBytes 4194304`) {
		t.Errorf("4 GiB + 1 MiB: %v", err)
	}
	resp, err := offloadRaw(ctx, cl, kvoffload.NewTxnID(), keys[:2], []int{1<<20 + 1, 10})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Results[0]; r.Outcome != pb.Outcome_OUTCOME_REJECTED || !strings.Contains(r.Reason, "1048577 bytes exceeds MaxObjectBytes 1048576") {
		t.Errorf("object of 1 MiB + 1: %v", r)
	}
	if r := resp.Results[1]; r.Outcome != pb.Outcome_OUTCOME_STORED {
		t.Errorf("its sibling: %v", r)
	}
}

// TestRemoveReusedTxnIDOnTheWire: Remove under the txn ID of an offload is FailedPrecondition,
// as an offload under a used ID is, and removes nothing: not removed=false with no error.
func TestRemoveReusedTxnIDOnTheWire(t *testing.T) {
	n, _, _, cl := apiNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := keyOf("rmid", 0)
	id := kvoffload.NewTxnID()
	if _, err := offloadRaw(ctx, cl, id, []string{key}, []int{10}); err != nil {
		t.Fatal(err)
	}
	resp, err := cl.Remove(ctx, &pb.RemoveRequest{Keys: []string{key}, TxnId: id[:]})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "txn ID already used") {
		t.Fatalf("remove under an offload's txn ID: %v %v", err, resp)
	}
	if _, ok := n.FSM().Lookup(key); !ok {
		t.Fatal("the refused remove removed the key")
	}
}
