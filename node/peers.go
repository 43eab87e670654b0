package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/raftmeta"
	"github.com/kvoffload/kvoffload/txn"
)

// Timeouts of node-to-node calls.
const (
	// ownerReadBase is the part of a forwarded read's deadline that does not depend on its
	// size. A dead owner is a fast miss anyway (its port refuses the connection at once,
	// CASES.md C9); the deadline matters for an owner that is alive but does not answer
	// (paused, partitioned), and must not fail a busy owner.
	ownerReadBase = time.Second
	// suspectReadBase replaces ownerReadBase for an owner whose last read timed out, for
	// suspectFor: an unresponsive owner costs one slow miss, then fast ones (C9: < 100 ms).
	suspectReadBase = 75 * time.Millisecond
	suspectFor      = 5 * time.Second
	// ownerReadRate is the transfer rate (bytes/s) the rest of the deadline assumes.
	ownerReadRate = 100 << 20
	// leaderWait bounds how long a forwarded proposal waits for a leader to be known.
	leaderWait = 10 * time.Second
)

// peers holds one gRPC connection per other node, by peer address, and remembers which
// owners recently failed to answer in time.
type peers struct {
	tls     *tlsMaterial  // nil: plaintext
	cluster func() string // this node's cluster ID, stamped on every call
	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	suspect map[string]time.Time // owner -> until when its reads get the short deadline
}

func newPeers(tm *tlsMaterial, cluster func() string) *peers {
	return &peers{tls: tm, cluster: cluster, conns: map[string]*grpc.ClientConn{}, suspect: map[string]time.Time{}}
}

// readBase returns the size-independent deadline for a read from owner.
func (p *peers) readBase(owner string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.suspect[owner]) {
		return suspectReadBase
	}
	return ownerReadBase
}

// noteRead records whether owner answered in time.
func (p *peers) noteRead(owner string, timedOut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if timedOut {
		p.suspect[owner] = time.Now().Add(suspectFor)
	} else {
		delete(p.suspect, owner)
	}
}

func (p *peers) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if p.tls != nil {
		creds = credentials.NewTLS(p.tls.peerClient())
	}
	unary, stream := clusterIDInterceptors(p.cluster)
	c, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithUnaryInterceptor(unary), grpc.WithStreamInterceptor(stream),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgBytes), grpc.MaxCallSendMsgSize(maxMsgBytes)))
	if err != nil {
		return nil, fmt.Errorf("node: dialing %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[string]*grpc.ClientConn{}
}

// clusterMeta is txn.Meta for a cluster member: local FSM reads, proposals and barriers
// forwarded to the leader when this node is not it.
type clusterMeta struct {
	meta
	peers *peers
	id    string // this node's ID
}

func (m clusterMeta) Propose(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	for {
		res, err := m.r.Propose(ctx, cmd)
		if !errors.Is(err, raftmeta.ErrNotLeader) {
			return res, err
		}
		cl, err := m.leaderClient(ctx)
		if err != nil {
			return nil, err
		}
		resp, err := cl.Propose(ctx, &pb.ProposeRequest{Command: cmd})
		if status.Code(err) == codes.FailedPrecondition {
			continue // the leader moved between lookup and call: look again
		}
		if status.Code(err) == codes.PermissionDenied {
			// A definite refusal (this node is outside the configuration): no retry helps.
			return nil, fmt.Errorf("%w: forwarded proposal: %w", txn.ErrRefused, err)
		}
		if err != nil {
			// The leader may have applied it before the reply was lost.
			return nil, fmt.Errorf("%w: forwarded proposal: %w", raftmeta.ErrIndeterminate, err)
		}
		var r fsm.Result
		if err := json.Unmarshal(resp.Result, &r); err != nil {
			return nil, fmt.Errorf("%w: decoding forwarded result: %w", raftmeta.ErrIndeterminate, err)
		}
		// Return only once this node has applied the command too: the coordinator releases
		// its in-flight keys on return, and they must then be visible here (single-flight,
		// read-your-writes on the node that offloaded).
		if err := m.r.WaitApplied(ctx, r.Index); err != nil {
			return nil, fmt.Errorf("%w: %w", raftmeta.ErrIndeterminate, err)
		}
		return &r, nil
	}
}

// Barrier on a follower asks the leader for a barrier and waits until this node has applied
// at least as far as the leader had (reliability.md §8: resolve intents only after catch-up).
func (m clusterMeta) Barrier(ctx context.Context) error {
	for {
		err := m.r.Barrier(ctx)
		if !errors.Is(err, raftmeta.ErrNotLeader) {
			return err
		}
		cl, err := m.leaderClient(ctx)
		if err != nil {
			return err
		}
		resp, err := cl.Barrier(ctx, &pb.BarrierRequest{})
		if status.Code(err) == codes.FailedPrecondition {
			continue
		}
		if err != nil {
			return fmt.Errorf("node: forwarded barrier: %w", err)
		}
		return m.r.WaitApplied(ctx, resp.AppliedIndex)
	}
}

// ReadIndex on a cluster member: the leader's read index (raftmeta.Node.ReadIndex: one
// heartbeat round, no log write), then a wait until this node has applied it, so the local
// metadata reflects every command acknowledged anywhere before the call.
func (m clusterMeta) ReadIndex(ctx context.Context) error {
	for {
		index, err := m.r.ReadIndex(ctx)
		if errors.Is(err, raftmeta.ErrNotLeader) {
			cl, cerr := m.leaderClient(ctx)
			if cerr != nil {
				return cerr
			}
			resp, rerr := cl.ReadIndex(ctx, &pb.ReadIndexRequest{NodeId: m.id})
			if status.Code(rerr) == codes.FailedPrecondition {
				continue // the leader moved between lookup and call: look again
			}
			if rerr != nil {
				return fmt.Errorf("node: forwarded read index: %w", rerr)
			}
			index, err = resp.ReadIndex, nil
		}
		if err != nil {
			return err
		}
		return m.r.WaitApplied(ctx, index)
	}
}

// leaderClient waits until a leader with a known API address exists and returns a client
// for it.
func (m clusterMeta) leaderClient(ctx context.Context) (pb.ClusterClient, error) {
	deadline := time.Now().Add(leaderWait)
	for {
		if id, _ := m.r.Leader(); id != "" {
			if mem, ok := m.f.Member(id); ok && mem.PeerTarget() != "" {
				c, err := m.peers.conn(mem.PeerTarget())
				if err != nil {
					return nil, err
				}
				return pb.NewClusterClient(c), nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: no leader with a known API address", raftmeta.ErrNotLeader)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("node: waiting for a leader: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// remoteReader reads keys from the node that owns their bytes (txn.Remote).
type remoteReader struct {
	f     *fsm.FSM
	peers *peers
}

func (r remoteReader) ReadRemote(ctx context.Context, owner string, keys []string, size int64) []txn.GetResult {
	fail := func(reason string) []txn.GetResult {
		out := make([]txn.GetResult, len(keys))
		for i, k := range keys {
			out[i] = txn.GetResult{Key: k, Status: txn.Unavailable, Reason: reason}
		}
		return out
	}
	mem, ok := r.f.Member(owner)
	if !ok || mem.PeerTarget() == "" {
		return fail("owner " + owner + " is not a known member")
	}
	conn, err := r.peers.conn(mem.PeerTarget())
	if err != nil {
		return fail(err.Error())
	}
	rctx, cancel := context.WithTimeout(ctx, r.peers.readBase(owner)+time.Duration(size)*time.Second/ownerReadRate)
	defer cancel()
	stream, err := pb.NewClusterClient(conn).ReadLocal(rctx, &pb.GetRequest{Keys: keys})
	var out []txn.GetResult
	if err == nil {
		out, err = recvGets(stream, keys)
	}
	if ctx.Err() == nil {
		r.peers.noteRead(owner, status.Code(err) == codes.DeadlineExceeded)
	}
	if err != nil {
		return fail(fmt.Sprintf("owner %s unavailable: %v", owner, err))
	}
	return out
}

// recvGets reassembles a stream of GetChunk messages into one result per key.
func recvGets(stream grpc.ServerStreamingClient[pb.GetChunk], keys []string) ([]txn.GetResult, error) {
	out := make([]txn.GetResult, len(keys))
	for i, k := range keys {
		out[i] = txn.GetResult{Key: k, Status: txn.Unavailable, Reason: "missing from the owner's reply"}
	}
	sizes := make([]uint64, len(keys))
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		i := int(ch.Index)
		if i >= len(keys) {
			return nil, fmt.Errorf("chunk for key %d of %d", i, len(keys))
		}
		if ch.Status != pb.GetStatus_GET_STATUS_UNSPECIFIED {
			if ch.Size > bucketstore.MaxRecordLen {
				return nil, fmt.Errorf("the owner announced %d bytes for key %d, over the largest record of %d", ch.Size, i, int64(bucketstore.MaxRecordLen))
			}
			out[i] = txn.GetResult{Key: keys[i], Status: fromPBStatus(ch.Status), Reason: ch.Reason}
			sizes[i] = ch.Size
			if ch.Size > 0 {
				// Up to 8 MiB ahead; more as bytes arrive: an announced size costs no memory
				// until the data comes.
				out[i].Value = make([]byte, 0, min(ch.Size, 8<<20))
			}
		}
		if uint64(len(out[i].Value))+uint64(len(ch.Data)) > sizes[i] {
			return nil, fmt.Errorf("the owner sent more than the %d bytes it announced for key %d", sizes[i], i)
		}
		out[i].Value = append(out[i].Value, ch.Data...)
	}
	for i := range out {
		if out[i].Status == txn.Found && uint64(len(out[i].Value)) != sizes[i] {
			out[i] = txn.GetResult{Key: keys[i], Status: txn.Unavailable,
				Reason: fmt.Sprintf("owner sent %d of %d bytes", len(out[i].Value), sizes[i])}
		}
	}
	return out, nil
}
