package node

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn"
)

// kvService implements the client-facing KVOffload gRPC service over a Node.
type kvService struct {
	pb.UnimplementedKVOffloadServer
	n *Node
}

// BatchOffload reassembles the chunked objects (each value buffered once, preallocated to its
// announced size) and runs them as one transaction.
func (s kvService) BatchOffload(stream grpc.ClientStreamingServer[pb.OffloadChunk, pb.OffloadResponse]) error {
	if err := s.n.waitReady(stream.Context()); err != nil {
		return err
	}
	start := time.Now()
	id, objs, tooLarge, err := s.recvBatch(stream)
	if err != nil {
		return err
	}
	res, err := s.n.coord.BatchOffload(stream.Context(), id, objs)
	if err != nil {
		return grpcError(err)
	}
	out := &pb.OffloadResponse{Results: make([]*pb.KeyResult, len(res))}
	for i, r := range res {
		if reason, ok := tooLarge[i]; ok {
			r.Outcome, r.Reason = txn.Rejected, reason
		}
		out.Results[i] = &pb.KeyResult{Key: r.Key, Outcome: toPBOutcome(r.Outcome), Joined: r.Joined, Reason: r.Reason}
	}
	s.n.metrics.observeOffload(res, objs, time.Since(start))
	return stream.SendAndClose(out)
}

// recvBatch reads the whole client stream. Objects over the size limit are not buffered:
// their bytes are discarded and the key is reported Rejected.
func (s kvService) recvBatch(stream grpc.ClientStreamingServer[pb.OffloadChunk, pb.OffloadResponse]) (fsm.TxnID, []txn.Object, map[int]string, error) {
	var id fsm.TxnID
	var objs []txn.Object
	tooLarge := map[int]string{}
	var remaining, total uint64
	lim := s.n.cfg.Txn
	for first := true; ; first = false {
		ch, err := stream.Recv()
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
				return id, nil, nil, grpcError(txn.ErrBatchTooLarge)
			}
			objs = append(objs, txn.Object{Key: ch.Key})
			remaining = ch.Size
			if total += ch.Size; total > uint64(lim.MaxBatchBytes) {
				return id, nil, nil, grpcError(txn.ErrBatchTooLarge)
			}
			if ch.Size > uint64(lim.MaxObjectBytes) {
				tooLarge[len(objs)-1] = "too large: exceeds the limit on object bytes"
			} else {
				// Grow as bytes arrive beyond a first 8 MiB: an announced size costs no
				// memory until the data comes (a stream announcing 64 MiB and sending
				// nothing must not reserve 64 MiB).
				objs[len(objs)-1].Value = make([]byte, 0, min(ch.Size, 8<<20))
			}
		}
		if len(ch.Data) == 0 {
			continue
		}
		if len(objs) == 0 || uint64(len(ch.Data)) > remaining {
			return id, nil, nil, invalid("data beyond the announced object size")
		}
		remaining -= uint64(len(ch.Data))
		if _, big := tooLarge[len(objs)-1]; !big {
			objs[len(objs)-1].Value = append(objs[len(objs)-1].Value, ch.Data...)
		}
	}
	if remaining != 0 {
		return id, nil, nil, invalid("the stream ended %d bytes short", remaining)
	}
	return id, objs, tooLarge, nil
}

func (s kvService) BatchGet(req *pb.GetRequest, stream grpc.ServerStreamingServer[pb.GetChunk]) error {
	if err := s.n.waitReady(stream.Context()); err != nil {
		return err
	}
	res, err := s.n.coord.BatchGet(stream.Context(), req.Keys)
	if err != nil {
		return grpcError(err)
	}
	s.n.metrics.observeGets(res)
	return sendGets(stream.Send, res)
}

func (s kvService) BatchExists(ctx context.Context, req *pb.ExistsRequest) (*pb.ExistsResponse, error) {
	if err := s.n.waitReady(ctx); err != nil {
		return nil, err
	}
	ex := s.n.coord.BatchExistsLease(ctx, req.Keys, time.Duration(req.LeaseMs)*time.Millisecond)
	out := &pb.ExistsResponse{Keys: make([]pb.Presence, len(ex.Keys)), PrefixPresent: uint32(ex.PrefixPresent)}
	for i, p := range ex.Keys {
		out.Keys[i] = toPBPresence(p)
	}
	return out, nil
}

func (s kvService) Remove(ctx context.Context, req *pb.RemoveRequest) (*pb.RemoveResponse, error) {
	if err := s.n.waitReady(ctx); err != nil {
		return nil, err
	}
	id := txn.NewTxnID()
	switch len(req.TxnId) {
	case 0:
	case len(id):
		copy(id[:], req.TxnId)
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
	st, err := s.n.Stats()
	if err != nil {
		return nil, grpcError(err)
	}
	own := s.n.fsm.Owners()[s.n.cfg.ID]
	t := st.Txn
	return &pb.StatsResponse{
		NodeId: s.n.cfg.ID, Keys: uint64(st.Meta.Keys), Bytes: uint64(st.Meta.Bytes),
		LocalKeys: uint64(own.Keys), LocalBytes: uint64(own.Bytes),
		LiveBytes: st.Buckets.LiveBytes, AllocatedBytes: st.Buckets.AllocatedBytes,
		Counters: map[string]uint64{
			"txns": t.Txns, "stored": t.Stored, "already_stored": t.AlreadyStored, "joined": t.Joined,
			"conflicts": t.Conflicts, "rejected": t.Rejected, "failed": t.Failed, "waits": t.Waits,
			"aborts": t.Aborts, "gets": t.Gets, "get_corrupt": t.GetCorrupt, "removed": t.Removed,
		},
	}, nil
}
