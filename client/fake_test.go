package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// fakeCluster is an in-memory kvoffload member: it implements KVOffload (not the peer-only
// Cluster service, which the client must never need) over real gRPC on 127.0.0.1:0, de-duplicates offloads by txn ID like the real store, and records what
// it received. Several fakeNodes may serve one fakeCluster (the members of one cluster).
type fakeCluster struct {
	kvoffloadv1.UnimplementedKVOffloadServer

	getChunk int // value bytes per GetChunk the fake sends

	mu           sync.Mutex
	txns         []string // txn ID of every BatchOffload call, in order
	keysSeen     []string // every key the fake received, in any call
	dataSizes    []int    // len(data) of every OffloadChunk received
	idMsgs       int      // OffloadChunks that carried a txn ID
	stored       map[string][]byte
	results      map[string]*kvoffloadv1.OffloadResponse
	offloadCalls int
	getCalls     int

	// offloadHook runs after each message of a BatchOffload is received (msgs counts them);
	// an error ends the call with it.
	offloadHook func(ctx context.Context, call, msgs int, id string) error
	// getHook, when set, answers BatchGet instead of the default; returning errDefault falls
	// back to the default answer.
	getHook func(call int, req *kvoffloadv1.GetRequest, st grpc.ServerStreamingServer[kvoffloadv1.GetChunk]) error
}

var errDefault = errors.New("fake: default answer")

func newFake() *fakeCluster {
	return &fakeCluster{getChunk: 64 << 10, stored: map[string][]byte{}, results: map[string]*kvoffloadv1.OffloadResponse{}}
}

// fakeNode is one gRPC server of a fakeCluster.
type fakeNode struct {
	addr string
	srv  *grpc.Server
}

// startNode serves f on a fresh 127.0.0.1 port, with opts added to the server's options.
func startNode(f *fakeCluster, opts ...grpc.ServerOption) (*fakeNode, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(8 << 20)}, opts...)...)
	kvoffloadv1.RegisterKVOffloadServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	return &fakeNode{addr: lis.Addr().String(), srv: srv}, nil
}

func mustStartNode(t *testing.T, f *fakeCluster, opts ...grpc.ServerOption) *fakeNode {
	t.Helper()
	n, err := startNode(f, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.srv.Stop)
	return n
}

// deadAddr returns an address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

type fakeObj struct {
	key  string
	size uint64
	data []byte
}

func (f *fakeCluster) BatchOffload(st grpc.ClientStreamingServer[kvoffloadv1.OffloadChunk, kvoffloadv1.OffloadResponse]) error {
	f.mu.Lock()
	f.offloadCalls++
	call, hook := f.offloadCalls, f.offloadHook
	f.mu.Unlock()
	var id string
	var objs []*fakeObj
	for msgs := 1; ; msgs++ {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := f.note(m, msgs, &id); err != nil {
			return err
		}
		if m.GetKey() != "" {
			objs = append(objs, &fakeObj{key: m.GetKey(), size: m.GetSize()})
		} else if len(objs) == 0 && len(m.GetData()) > 0 {
			return status.Error(codes.InvalidArgument, "data before the first key")
		}
		if len(objs) > 0 {
			o := objs[len(objs)-1]
			o.data = append(o.data, m.GetData()...)
		}
		if hook != nil {
			if err := hook(st.Context(), call, msgs, id); err != nil {
				return err
			}
		}
	}
	for _, o := range objs {
		if uint64(len(o.data)) != o.size {
			return status.Errorf(codes.InvalidArgument, "%s: got %d of %d bytes", o.key, len(o.data), o.size)
		}
	}
	return st.SendAndClose(f.apply(id, objs))
}

// note records one received message and checks the txn ID framing.
func (f *fakeCluster) note(m *kvoffloadv1.OffloadChunk, msgs int, id *string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dataSizes = append(f.dataSizes, len(m.GetData()))
	if m.GetKey() != "" {
		f.keysSeen = append(f.keysSeen, m.GetKey())
	}
	if len(m.GetTxnId()) > 0 {
		f.idMsgs++
	}
	if msgs == 1 {
		if len(m.GetTxnId()) != 16 {
			return status.Errorf(codes.InvalidArgument, "first message has a %d-byte txn id", len(m.GetTxnId()))
		}
		*id = string(m.GetTxnId())
		f.txns = append(f.txns, *id)
	}
	return nil
}

// apply stores a complete batch, or returns the results of its earlier run.
func (f *fakeCluster) apply(id string, objs []*fakeObj) *kvoffloadv1.OffloadResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.results[id]; ok {
		return r
	}
	resp := &kvoffloadv1.OffloadResponse{}
	for _, o := range objs {
		r := &kvoffloadv1.KeyResult{Key: o.key, Outcome: kvoffloadv1.Outcome_OUTCOME_STORED}
		if old, ok := f.stored[o.key]; ok && bytes.Equal(old, o.data) {
			r.Outcome = kvoffloadv1.Outcome_OUTCOME_ALREADY_STORED
		} else if ok {
			r.Outcome, r.Reason = kvoffloadv1.Outcome_OUTCOME_CONFLICT, "committed with different bytes"
		} else {
			f.stored[o.key] = o.data
		}
		resp.Results = append(resp.Results, r)
	}
	f.results[id] = resp
	return resp
}

// abort records txn id as aborted with n keys, as the real store does when it rolls back.
func (f *fakeCluster) abort(id string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &kvoffloadv1.OffloadResponse{}
	for range n {
		resp.Results = append(resp.Results, &kvoffloadv1.KeyResult{Outcome: kvoffloadv1.Outcome_OUTCOME_FAILED, Code: kvoffloadv1.Code_CODE_ABORTED, Reason: "transaction aborted"})
	}
	f.results[id] = resp
}

func (f *fakeCluster) snapshot() (txns []string, dataSizes []int, idMsgs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.txns...), append([]int(nil), f.dataSizes...), f.idMsgs
}

func (f *fakeCluster) BatchGet(req *kvoffloadv1.GetRequest, st grpc.ServerStreamingServer[kvoffloadv1.GetChunk]) error {
	f.mu.Lock()
	f.getCalls++
	call, hook := f.getCalls, f.getHook
	f.keysSeen = append(f.keysSeen, req.GetKeys()...)
	f.mu.Unlock()
	if hook != nil {
		if err := hook(call, req, st); !errors.Is(err, errDefault) {
			return err
		}
	}
	for i, k := range req.GetKeys() {
		f.mu.Lock()
		v, ok := f.stored[k]
		f.mu.Unlock()
		if err := f.sendValue(st, uint32(i), v, ok); err != nil {
			return err
		}
	}
	return nil
}

// sendValue streams one key's answer in chunks of f.getChunk bytes.
func (f *fakeCluster) sendValue(st grpc.ServerStreamingServer[kvoffloadv1.GetChunk], i uint32, v []byte, found bool) error {
	if !found {
		return st.Send(&kvoffloadv1.GetChunk{Index: i, Status: kvoffloadv1.GetStatus_GET_STATUS_NOT_FOUND})
	}
	n := min(len(v), f.getChunk)
	if err := st.Send(&kvoffloadv1.GetChunk{Index: i, Status: kvoffloadv1.GetStatus_GET_STATUS_FOUND, Size: uint64(len(v)), Data: v[:n]}); err != nil {
		return err
	}
	for off := n; off < len(v); off += f.getChunk {
		if err := st.Send(&kvoffloadv1.GetChunk{Index: i, Data: v[off:min(off+f.getChunk, len(v))]}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeCluster) BatchExists(_ context.Context, req *kvoffloadv1.ExistsRequest) (*kvoffloadv1.ExistsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keysSeen = append(f.keysSeen, req.GetKeys()...)
	resp := &kvoffloadv1.ExistsResponse{}
	prefix := true
	for _, k := range req.GetKeys() {
		p := kvoffloadv1.Presence_PRESENCE_ABSENT
		if _, ok := f.stored[k]; ok {
			p = kvoffloadv1.Presence_PRESENCE_PRESENT
		} else if strings.HasPrefix(k, "inflight/") {
			p = kvoffloadv1.Presence_PRESENCE_IN_FLIGHT
		} else if strings.HasPrefix(k, "unknown/") {
			p, resp.Reason = kvoffloadv1.Presence_PRESENCE_UNKNOWN, "read index: no leader"
		}
		// Unknown keys count towards the fake's prefix, as a careless member might count
		// them: the client must stop at the first key that is not Present all the same.
		prefix = prefix && (p == kvoffloadv1.Presence_PRESENCE_PRESENT || p == kvoffloadv1.Presence_PRESENCE_UNKNOWN)
		if prefix {
			resp.PrefixPresent++
		}
		resp.Keys = append(resp.Keys, p)
	}
	return resp, nil
}

func (f *fakeCluster) Remove(_ context.Context, req *kvoffloadv1.RemoveRequest) (*kvoffloadv1.RemoveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keysSeen = append(f.keysSeen, req.GetKeys()...)
	resp := &kvoffloadv1.RemoveResponse{}
	for _, k := range req.GetKeys() {
		_, ok := f.stored[k]
		delete(f.stored, k)
		resp.Removed = append(resp.Removed, ok)
	}
	return resp, nil
}

func (f *fakeCluster) Stats(context.Context, *kvoffloadv1.StatsRequest) (*kvoffloadv1.StatsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b uint64
	for _, v := range f.stored {
		b += uint64(len(v))
	}
	return &kvoffloadv1.StatsResponse{NodeId: "fake", Keys: uint64(len(f.stored)), Bytes: b,
		Counters: map[string]uint64{"offload_calls": uint64(f.offloadCalls)}}, nil
}

func (f *fakeCluster) Status(context.Context, *kvoffloadv1.StatusRequest) (*kvoffloadv1.StatusResponse, error) {
	return &kvoffloadv1.StatusResponse{LeaderId: "n1", AppliedIndex: 42, Keys: 3, Bytes: 300, Members: []*kvoffloadv1.Member{
		{NodeId: "n1", RaftAddr: "127.0.0.1:7001", ApiAddr: "127.0.0.1:8001", Voter: true, Leader: true, Keys: 2, Bytes: 200},
		{NodeId: "n2", RaftAddr: "127.0.0.1:7002", ApiAddr: "127.0.0.1:8002", Voter: true, Keys: 1, Bytes: 100},
	}}, nil
}

func (f *fakeCluster) setOffloadHook(h func(ctx context.Context, call, msgs int, id string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offloadHook = h
}

func (f *fakeCluster) setGetHook(h func(call int, req *kvoffloadv1.GetRequest, st grpc.ServerStreamingServer[kvoffloadv1.GetChunk]) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.getHook = h
}

// value returns what the fake stored for key.
func (f *fakeCluster) value(key string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.stored[key]
	return v, ok
}

func (f *fakeCluster) calls() (offload, get int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.offloadCalls, f.getCalls
}

// seen returns every key the fake received.
func (f *fakeCluster) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keysSeen...)
}

func (f *fakeCluster) val(key string) []byte { v, _ := f.value(key); return v }
