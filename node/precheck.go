package node

import (
	"context"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/txn"
)

// Precheck answers, per key, whether it is committed with the given size and checksum, so
// that the client need not upload it (the lean stream path). The node first catches up with
// the leader (a read index), so every "stored" holds at a point after the call began; a key
// the node cannot confirm, or in flight, is needed. A txn ID that already has a result answers every key needed (a retry gets the
// original results from BatchOffload); a retry racing the first call of its txn ID, still
// running, may see AlreadyStored where that call answers Stored (both OK outcomes).
func (s kvService) Precheck(ctx context.Context, req *pb.PrecheckRequest) (*pb.PrecheckResponse, error) {
	if err := s.n.waitReady(ctx); err != nil {
		return nil, err
	}
	if lim := s.n.cfg.Txn.MaxBatchKeys; len(req.Keys) > lim {
		return nil, grpcError(txn.BatchKeysError(uint64(len(req.Keys)), req.Keys[lim].GetKey(), lim))
	}
	var id fsm.TxnID
	if len(req.TxnId) != len(id) {
		return nil, invalid("txn_id must be %d bytes, got %d", len(id), len(req.TxnId))
	}
	copy(id[:], req.TxnId)
	out := &pb.PrecheckResponse{Stored: make([]bool, len(req.Keys))}
	// Every answer must hold at a point inside the offload call: catch up with the leader
	// first, or claim nothing (every key needed). A Present from lagging metadata would let the
	// client report AlreadyStored for a key removed before the call began.
	if err := s.n.coord.OffloadCatchUp(ctx); err != nil {
		return out, nil
	}
	if _, done := s.n.fsm.TxnResult(id); done {
		return out, nil // a retry: BatchOffload answers with the original results
	}
	// After the catch-up the local metadata answers: a key in flight is not live in it yet,
	// so it is needed (and joined by BatchOffload).
	for i, k := range req.Keys {
		if kvoffload.CheckKey(k.GetKey()) != "" {
			continue
		}
		if e, ok := s.n.fsm.Lookup(k.GetKey()); ok && uint64(e.Size) == k.GetSize() && e.Sum == k.GetSum() {
			out.Stored[i] = true
		}
	}
	return out, nil
}
