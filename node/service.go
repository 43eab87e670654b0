package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/membudget"
	"github.com/kvoffload/kvoffload/internal/transport"
	"github.com/kvoffload/kvoffload/internal/wire"
	"github.com/kvoffload/kvoffload/txn"
)

// kvService implements the client-facing KVOffload gRPC service over a Node.
type kvService struct {
	pb.UnimplementedKVOffloadServer
	n *Node
}

// BatchOffload reassembles the chunked objects (each value buffered once, within the node's
// buffer budget) and runs them as one transaction.
func (s kvService) BatchOffload(stream grpc.ClientStreamingServer[pb.OffloadChunk, pb.OffloadResponse]) error {
	if err := s.n.waitReady(stream.Context()); err != nil {
		return err
	}
	start := time.Now()
	buf := s.n.metrics.buffers.NewHold()
	defer buf.Release() // after the response is sent: the coordinator may hold the values until then
	id, objs, tooLarge, err := s.recvBatch(stream, buf)
	if err != nil {
		return err
	}
	res, err := s.n.coord.BatchOffload(stream.Context(), id, objs)
	if err != nil {
		return grpcError(err)
	}
	out := &pb.OffloadResponse{Results: make([]*pb.KeyResult, len(res))}
	for i := range res {
		r := &res[i]
		if reason, ok := tooLarge[i]; ok {
			r.Outcome, r.Code, r.Reason = kvoffload.Rejected, kvoffload.CodeTooLarge, reason
		}
		out.Results[i] = wire.KeyResultToPB(*r)
	}
	s.n.metrics.observeOffload(id, res, objs, time.Since(start))
	return stream.SendAndClose(out)
}

// firstValueBytes is the first allocation (and buffer-budget reservation) for an object's
// value; it doubles from there as bytes arrive, up to the announced size. Small, so that a
// stream announcing a large object and sending one byte holds 64 KiB, not the announced size:
// what a stream holds is at most twice what it sent (TestIdleOffloadStreamEnds).
const firstValueBytes = 64 << 10

// recvBatch reads the whole client stream, refusing it as soon as it goes over MaxBatchKeys,
// MaxBatchKeyBytes or MaxBatchBytes. Objects over the size limit are not buffered:
// their bytes are discarded and the key is reported Rejected. A value's buffer is allocated
// as its bytes arrive, not when its size is announced (a stream announcing 64 MiB and sending
// nothing reserves nothing), and each allocation is acquired from buf first, waiting while
// the node's budget is taken (the stream is not read meanwhile: back-pressure on the client).
func (s kvService) recvBatch(stream grpc.ClientStreamingServer[pb.OffloadChunk, pb.OffloadResponse], buf *membudget.Hold) (fsm.TxnID, []kvoffload.Object, map[int]string, error) {
	var id fsm.TxnID
	var objs []kvoffload.Object
	tooLarge := map[int]string{}
	var remaining, total, keyBytes uint64
	lim := s.n.cfg.Txn
	recv := transport.IdleRecv(stream.Context(), stream.Recv, s.n.streamIdle())
	for first := true; ; first = false {
		ch, err := recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return id, nil, nil, err
		}
		if first {
			if len(ch.TxnId) != len(id) {
				return id, nil, nil, invalid("txn_id must be %d bytes, got %d", len(id), len(ch.TxnId))
			}
			copy(id[:], ch.TxnId)
			if err := kvoffload.CheckTxnID(id); err != nil {
				return id, nil, nil, invalid("%v", err)
			}
		}
		// A chunk starts a new object when the previous one is complete (after the first
		// chunk, which may carry only the txn ID of an empty batch): a continuation chunk
		// exists only while bytes remain, so an object with an empty key is not mistaken
		// for one and dropped; the coordinator rejects its key.
		if ch.Key != "" || (first && ch.Size > 0) || (!first && remaining == 0) {
			if remaining != 0 {
				return id, nil, nil, invalid("object %q ended %d bytes short", objs[len(objs)-1].Key, remaining)
			}
			if len(objs) >= lim.MaxBatchKeys {
				return id, nil, nil, grpcError(txn.BatchKeysError(uint64(len(objs)+1), ch.Key, lim.MaxBatchKeys))
			}
			if keyBytes += uint64(len(ch.Key)); keyBytes > uint64(lim.MaxBatchKeyBytes()) {
				return id, nil, nil, grpcError(txn.BatchKeyBytesError(keyBytes, ch.Key, lim.MaxBatchKeyBytes()))
			}
			objs = append(objs, kvoffload.Object{Key: ch.Key})
			remaining = ch.Size
			if ch.Size > uint64(lim.MaxBatchBytes)-total { // total <= MaxBatchBytes here: no overflow
				return id, nil, nil, grpcError(txn.BatchBytesError(satAdd(total, ch.Size), ch.Key, lim.MaxBatchBytes))
			}
			total += ch.Size
			if ch.Size > uint64(lim.MaxObjectBytes) {
				tooLarge[len(objs)-1] = txn.ObjectTooLarge(ch.Size, lim.MaxObjectBytes)
			}
		}
		if len(ch.Data) == 0 {
			continue
		}
		if len(objs) == 0 || uint64(len(ch.Data)) > remaining {
			return id, nil, nil, invalid("data beyond the announced object size")
		}
		remaining -= uint64(len(ch.Data))
		s.n.payloadIn.Add(uint64(len(ch.Data)))
		if _, big := tooLarge[len(objs)-1]; big {
			continue
		}
		o := &objs[len(objs)-1]
		// A value whole in one chunk (any value up to the chunk size) keeps the chunk's own
		// bytes, freshly unmarshalled, instead of a copy.
		whole := o.Value == nil && remaining == 0
		if need := len(o.Value) + len(ch.Data); whole || need > cap(o.Value) {
			size := need + int(remaining) // the announced size
			grown := min(size, max(need, 2*cap(o.Value), firstValueBytes))
			if whole {
				grown = need
			}
			if err := buf.Acquire(stream.Context(), int64(grown-cap(o.Value))); err != nil {
				return id, nil, nil, grpcError(fmt.Errorf("node: waiting for buffer space (MaxBufferedBytes %d) at key %q: %w", s.n.metrics.buffers.Limit(), o.Key, err))
			}
			if whole {
				o.Value = ch.Data
				continue
			}
			v := make([]byte, len(o.Value), grown)
			copy(v, o.Value)
			o.Value = v
		}
		o.Value = append(o.Value, ch.Data...)
	}
	if remaining != 0 {
		return id, nil, nil, invalid("the stream ended %d bytes short", remaining)
	}
	return id, objs, tooLarge, nil
}

// satAdd is a+b, or the largest uint64 if that overflows.
func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// BatchGet reads the keys and streams their values back in request order, each key as soon
// as it and every key before it are verified, so the first values are on the wire while the
// later reads are in flight. The bytes the values will hold (each distinct key once, from the
// lookup the reads use) are acquired from the node's buffer budget before anything is read,
// waiting while it is taken, and released once the last chunk is sent: two stalled readers
// of 16 positions of a 64 MiB key would otherwise hold 2 GiB (TestBufferBudgetStalledReaders,
// TestBufferBudgetRepeatedKeyCountsOnce). A client that takes no message for the idle limit
// (streamIdleTimeout) loses the stream, so a reader that stops reading cannot keep its share
// of the budget (TestIdleReaderLosesItsStream). What gRPC has queued for a stream it cannot
// send stays until the client reads or disconnects; wire.SendGet keeps that to about a chunk
// (internal/wire).
func (s kvService) BatchGet(req *pb.GetRequest, stream grpc.ServerStreamingServer[pb.GetChunk]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	if err := s.n.waitReady(ctx); err != nil {
		return err
	}
	start := time.Now()
	buf := s.n.metrics.buffers.NewHold()
	defer buf.Release()
	q := wire.NewInOrder(len(req.Keys))
	go func() {
		q.End(s.n.batchGetEach(ctx, req.Keys, buf.Reserver(ctx), q.Put))
	}()
	defer func() {
		cancel() // the reads left stop at once
		q.Wait() // and nothing is visited after this
	}()
	send := transport.IdleSend(ctx, stream.Send, s.n.streamIdle())
	sent := make([]kvoffload.GetResult, 0, len(req.Keys)) // what was sent, without values, for the metrics
	defer func() { s.n.metrics.observeGets(sent, time.Since(start)) }()
	for i := range req.Keys {
		r, err := q.Next(i)
		if err != nil {
			return grpcError(err)
		}
		if err := wire.SendGet(send, i, r); err != nil {
			return err
		}
		r.Value = nil
		sent = append(sent, r)
	}
	return nil
}

func (s kvService) BatchExists(ctx context.Context, req *pb.ExistsRequest) (*pb.ExistsResponse, error) {
	if err := s.n.waitReady(ctx); err != nil {
		return nil, err
	}
	ex, err := s.n.BatchExists(ctx, req.Keys, time.Duration(req.LeaseMs)*time.Millisecond)
	if err != nil {
		return nil, grpcError(err)
	}
	out := &pb.ExistsResponse{Keys: make([]pb.Presence, len(ex.Keys)), PrefixPresent: uint32(ex.PrefixPresent), Reason: wire.Reason(ex.Reason)}
	for i, p := range ex.Keys {
		out.Keys[i] = wire.PresenceToPB(p)
	}
	s.n.metrics.observeExists(req.Keys, ex)
	return out, nil
}

// Status is Cluster/Status on the client API (read-only: members, leader, keys and bytes
// per node), so clients and `storenode status` need no access to the peer listener. A node
// that refuses offloads and reads (removed, fail-stopped) still answers it, with the reason in
// the wire.RefusingHeader header: its view of the cluster is what an operator needs then.
func (s kvService) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	if err := s.n.coord.Usable(); err != nil {
		_ = grpc.SetHeader(ctx, metadata.Pairs(wire.RefusingHeader, err.Error()))
	}
	return s.n.member.Service().Status(ctx, req)
}

func (s kvService) Remove(ctx context.Context, req *pb.RemoveRequest) (*pb.RemoveResponse, error) {
	if err := s.n.waitReady(ctx); err != nil {
		return nil, err
	}
	id := kvoffload.NewTxnID()
	switch len(req.TxnId) {
	case 0:
	case len(id):
		copy(id[:], req.TxnId)
		if err := kvoffload.CheckTxnID(id); err != nil {
			return nil, invalid("%v", err)
		}
	default:
		return nil, invalid("txn_id must be %d bytes, got %d", len(id), len(req.TxnId))
	}
	res, err := s.n.coord.RemoveTxn(ctx, id, req.Keys)
	if err != nil {
		return nil, grpcError(err)
	}
	out := &pb.RemoveResponse{Removed: make([]bool, len(res))}
	for i, r := range res {
		out.Removed[i] = r.Removed
	}
	return out, nil
}

func (s kvService) Stats(ctx context.Context, _ *pb.StatsRequest) (*pb.StatsResponse, error) {
	if err := s.n.waitReady(ctx); err != nil {
		return nil, err
	}
	st, err := s.n.Stats(ctx)
	if err != nil {
		return nil, grpcError(err)
	}
	return wire.StatsToPB(st), nil
}
