package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/wire"
)

// memMember is a minimal in-memory cluster member (no de-duplication, no limits): enough to
// drive replay --addr and status end to end through the client.
type memMember struct {
	kvoffloadv1.UnimplementedKVOffloadServer
	kvoffloadv1.UnimplementedClusterServer
	mu     sync.Mutex
	values map[string][]byte
	alone  bool // in no cluster yet: Status lists no member
	stall  bool // Status waits for its caller's deadline (a member still recovering)
	// members, when set, is the member list Status answers (else n1 alone, the leader).
	members []*kvoffloadv1.Member
	tokens  int // Status calls that carried an authorization header
	// refusing, when set, is the reason Status gives in its refusing header; noLeader makes
	// Status name no leader.
	refusing string
	noLeader bool
}

func (m *memMember) BatchOffload(st grpc.ClientStreamingServer[kvoffloadv1.OffloadChunk, kvoffloadv1.OffloadResponse]) error {
	var keys []string
	vals := map[string][]byte{}
	for {
		ch, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if ch.GetKey() != "" {
			keys = append(keys, ch.GetKey())
		}
		k := keys[len(keys)-1]
		vals[k] = append(vals[k], ch.GetData()...)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	resp := &kvoffloadv1.OffloadResponse{}
	for _, k := range keys {
		o := kvoffloadv1.Outcome_OUTCOME_STORED
		if _, ok := m.values[k]; ok {
			o = kvoffloadv1.Outcome_OUTCOME_ALREADY_STORED
		}
		m.values[k] = vals[k]
		resp.Results = append(resp.Results, &kvoffloadv1.KeyResult{Key: k, Outcome: o})
	}
	return st.SendAndClose(resp)
}

func (m *memMember) BatchGet(req *kvoffloadv1.GetRequest, st grpc.ServerStreamingServer[kvoffloadv1.GetChunk]) error {
	for i, k := range req.GetKeys() {
		m.mu.Lock()
		v, ok := m.values[k]
		m.mu.Unlock()
		ch := &kvoffloadv1.GetChunk{Index: uint32(i), Status: kvoffloadv1.GetStatus_GET_STATUS_NOT_FOUND}
		if ok {
			ch.Status, ch.Size, ch.Data = kvoffloadv1.GetStatus_GET_STATUS_FOUND, uint64(len(v)), v
		}
		if err := st.Send(ch); err != nil {
			return err
		}
	}
	return nil
}

func (m *memMember) Status(ctx context.Context, _ *kvoffloadv1.StatusRequest) (*kvoffloadv1.StatusResponse, error) {
	m.mu.Lock()
	if m.stall {
		m.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	defer m.mu.Unlock()
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("authorization")) > 0 {
		m.tokens++
	}
	if m.refusing != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(wire.RefusingHeader, m.refusing))
	}
	leader := "n1"
	if m.noLeader {
		leader = ""
	}
	if m.alone {
		return &kvoffloadv1.StatusResponse{}, nil
	}
	if m.members != nil {
		return &kvoffloadv1.StatusResponse{LeaderId: leader, Members: m.members}, nil
	}
	return &kvoffloadv1.StatusResponse{LeaderId: leader, AppliedIndex: 7, Keys: uint64(len(m.values)), Members: []*kvoffloadv1.Member{
		{NodeId: "n1", RaftAddr: "127.0.0.1:7000", ApiAddr: "127.0.0.1:7100", PeerAddr: "127.0.0.1:7300", Voter: true, Leader: leader != "", Keys: uint64(len(m.values))},
	}}, nil
}

func startMemMember(t *testing.T) (*memMember, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &memMember{values: map[string][]byte{}}
	srv := grpc.NewServer()
	kvoffloadv1.RegisterKVOffloadServer(srv, m)
	kvoffloadv1.RegisterClusterServer(srv, m)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return m, lis.Addr().String()
}

func deadAddress(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

func TestReplayRemote(t *testing.T) {
	m, addr := startMemMember(t)
	f := replayFlags{addr: deadAddress(t) + "," + addr, writers: 4, blockSize: "4KiB", requests: 20,
		model: "test-model", seed: 3, baseline: "512MiB", json: true}
	if err := runReplay(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	n := len(m.values)
	m.mu.Unlock()
	if n == 0 {
		t.Fatal("replay stored nothing on the member")
	}
}

func TestStatusRemote(t *testing.T) {
	_, addr := startMemMember(t)
	var text, js bytes.Buffer
	if err := runStatus(context.Background(), statusFlags{addr: addr, timeout: 5 * time.Second}, &text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"leader         n1", "applied index  7", "127.0.0.1:7000", "yes"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("status output lacks %q:\n%s", want, text.String())
		}
	}
	if err := runStatus(context.Background(), statusFlags{addr: addr, json: true, timeout: 5 * time.Second}, &js); err != nil {
		t.Fatal(err)
	}
	var got client.ClusterStatus
	if err := json.Unmarshal(js.Bytes(), &got); err != nil || got.LeaderID != "n1" || len(got.Members) != 1 || !got.Members[0].Leader {
		t.Fatalf("--json: %v %+v\n%s", err, got, js.String())
	}
	if !strings.Contains(js.String(), `"raft_addr":"127.0.0.1:7000"`) {
		t.Errorf("--json lacks snake_case fields: %s", js.String())
	}
}

// status asks every member itself whether it answers, since the answering member's view
// lists a stopped member like a running one. UP is yes for the member that answered and for
// another that answers its own probe, no for one whose address is dead.
func TestStatusProbesEveryMember(t *testing.T) {
	m1, addr1 := startMemMember(t)
	m2, addr2 := startMemMember(t)
	dead := deadAddress(t)
	m1.mu.Lock()
	m1.members = []*kvoffloadv1.Member{{NodeId: "n1", ApiAddr: addr1, Voter: true, Leader: true},
		{NodeId: "n2", ApiAddr: addr2, Voter: true}, {NodeId: "n3", ApiAddr: dead, Voter: true}}
	m1.mu.Unlock()
	var text, js bytes.Buffer
	if err := runStatus(context.Background(), statusFlags{addr: addr1, timeout: 5 * time.Second}, &text); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"n1": "yes", "n2": "yes", "n3": "no"} {
		var row string
		for _, l := range strings.Split(text.String(), "\n") {
			if strings.HasPrefix(l, id+" ") {
				row = l
			}
		}
		if f := strings.Fields(row); len(f) < 2 || f[1] != want {
			t.Errorf("member %s: row %q, want UP %s\n%s", id, row, want, text.String())
		}
	}
	if err := runStatus(context.Background(), statusFlags{addr: addr1, json: true, timeout: 5 * time.Second}, &js); err != nil {
		t.Fatal(err)
	}
	var got statusJSON
	if err := json.Unmarshal(js.Bytes(), &got); err != nil || !got.Up["n1"] || !got.Up["n2"] || got.Up["n3"] || len(got.Members) != 3 {
		t.Fatalf("--json: %v %+v\n%s", err, got, js.String())
	}
	// The member addresses come from the cluster: the probes never carry the user's token,
	// which goes only to the address the user gave.
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m2.mu.Lock()
	m2.tokens = 0
	m2.mu.Unlock()
	creds := apiCreds{tokenFile: tok, insecureToken: true}
	if err := runStatus(context.Background(), statusFlags{addr: addr1, timeout: 5 * time.Second, creds: creds}, io.Discard); err != nil {
		t.Fatal(err)
	}
	m1.mu.Lock()
	m2.mu.Lock()
	defer m1.mu.Unlock()
	defer m2.mu.Unlock()
	if m1.tokens == 0 || m2.tokens != 0 {
		t.Fatalf("authorization headers: %d at the address given, %d at a probed member; want some and none", m1.tokens, m2.tokens)
	}
}

// status of a member that is in no cluster yet (starting, or still joining) says so and
// fails, instead of printing an empty cluster with exit status 0.
func TestStatusNotJoined(t *testing.T) {
	m, addr := startMemMember(t)
	m.mu.Lock()
	m.alone = true
	m.mu.Unlock()
	for _, js := range []bool{false, true} {
		var out bytes.Buffer
		err := runStatus(context.Background(), statusFlags{addr: addr, json: js, timeout: 5 * time.Second}, &out)
		if err == nil || !strings.Contains(err.Error(), "in no cluster yet") || out.Len() != 0 {
			t.Fatalf("json %v: err %v, output %q", js, err, out.String())
		}
	}
}

// replay's probe of each address has its own deadline: a member that does not answer it
// leaves the dial of the others alone, and the replay starts (a probe sharing the dial's
// 10 s would leave the next address none).
func TestReplayProbeOfAStalledMember(t *testing.T) {
	slow, slowAddr := startMemMember(t)
	slow.mu.Lock()
	slow.stall = true
	slow.mu.Unlock()
	_, goodAddr := startMemMember(t)
	start := time.Now()
	target, closeAll, err := dialRemote(context.Background(), slowAddr+","+goodAddr, apiCreds{}, false)
	if err != nil {
		t.Fatalf("dial with one stalled member: %v", err)
	}
	defer closeAll()
	if el := time.Since(start); el > 3*probeTimeout {
		t.Fatalf("dial took %s", el)
	}
	if target == nil {
		t.Fatal("no target")
	}
}

func TestStatusUnreachable(t *testing.T) {
	start := time.Now()
	err := runStatus(context.Background(), statusFlags{addr: deadAddress(t), timeout: 3 * time.Second}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Fatalf("err %v", err)
	}
	if el := time.Since(start); el > 4*time.Second {
		t.Fatalf("took %s", el)
	}
	t.Log(err)
}

// status pointed at a gRPC port that serves no kvoffload API (a member's peer port) says so
// and asks for the API address, instead of only relaying gRPC's Unimplemented.
func TestStatusAtAPeerPort(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go srv.Serve(lis)
	defer srv.Stop()
	err = runStatus(context.Background(), statusFlags{addr: lis.Addr().String(), timeout: 3 * time.Second}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--api-addr") {
		t.Fatalf("status at a port without the API: %v, want it to ask for --api-addr", err)
	}
	// replay --addr too, before any batch, instead of every batch failing with gRPC's
	// "unknown service".
	if _, _, err := dialRemote(context.Background(), lis.Addr().String(), apiCreds{}, false); err == nil || !strings.Contains(err.Error(), "--api-addr") {
		t.Fatalf("replay at a port without the API: %v, want it to ask for --api-addr", err)
	}
}

// A token without TLS is refused as a flag mistake, in the flags' names, before anything is
// dialed (it was reported as "cannot reach the cluster", in the Go client's option names).
func TestTokenWithoutTLSIsAFlagError(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := runStatus(context.Background(), statusFlags{addr: deadAddress(t), timeout: time.Second, creds: apiCreds{tokenFile: tok}}, io.Discard)
	if err == nil || strings.Contains(err.Error(), "cannot reach") || !strings.Contains(err.Error(), "--tls-ca") || !strings.Contains(err.Error(), "--insecure-token") {
		t.Fatalf("status --token-file without --tls-ca: %v, want a flag error naming --tls-ca and --insecure-token", err)
	}
}

// status exits non-zero, after printing what it saw, when the member that answered refuses
// offloads and reads (the REFUSING line) or knows no leader; text and --json alike.
func TestStatusFailsWhenRefusingOrLeaderless(t *testing.T) {
	for _, tc := range []struct {
		name, refusing string
		noLeader       bool
		says           string
	}{
		{"refusing", "this node was removed from the cluster", false, "refuses offloads and reads (this node was removed from the cluster)"},
		{"no leader", "", true, "knows no leader"},
		{"refusing, no leader", "this node was removed from the cluster", true, "refuses offloads and reads (this node was removed from the cluster)"},
	} {
		m, addr := startMemMember(t)
		m.mu.Lock()
		m.refusing, m.noLeader = tc.refusing, tc.noLeader
		m.mu.Unlock()
		for _, js := range []bool{false, true} {
			var out bytes.Buffer
			err := runStatus(context.Background(), statusFlags{addr: addr, json: js, timeout: 5 * time.Second}, &out)
			if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), addr) {
				t.Errorf("%s, json %v: err %v, want one naming %s and saying %q", tc.name, js, err, addr, tc.says)
			}
			if tc.refusing != "" && err != nil && strings.Contains(err.Error(), "knows no leader") {
				t.Errorf("%s, json %v: err %v blames the cluster's leader for the member's own refusal", tc.name, js, err)
			}
			if !strings.Contains(out.String(), "n1") {
				t.Errorf("%s, json %v: nothing printed before the error: %q", tc.name, js, out.String())
			}
		}
	}
}
