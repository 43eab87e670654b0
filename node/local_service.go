package node

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/local"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/cluster"
	"github.com/kvoffload/kvoffload/internal/wire"
	"github.com/kvoffload/kvoffload/txn"
)

// serveLocal starts the local socket (Config.Local): the KVOffload service, LocalKVOffload
// and gRPC health over gRPC, and region registrations, on one Unix domain socket.
func (n *Node) serveLocal() error {
	lc := n.cfg.Local.withDefaults()
	n.regions = newRegions(lc)
	lis, err := listenLocal(lc.Socket, lc.SocketMode, func(rc *regConn) { n.serveRegistrations(rc) })
	if err != nil {
		return err
	}
	n.localListener = lis
	opts := append(cluster.ServerOptions(maxMsgBytes(n.cfg.Txn)), grpc.Creds(local.NewCredentials()))
	if tokens := n.cfg.Security.APITokens; len(tokens) > 0 {
		opts = append(opts, cluster.TokenCheck(tokens)...)
	}
	n.localServer = grpc.NewServer(opts...)
	pb.RegisterKVOffloadServer(n.localServer, kvService{n: n})
	pb.RegisterLocalKVOffloadServer(n.localServer, localService{n: n})
	registerHealth(n.localServer, n.health)
	go runServer(n.log, n.localServer, lis, "local")
	return nil
}

// LocalSocket is the path of the local socket ("" without one).
func (n *Node) LocalSocket() string {
	if n.localListener == nil {
		return ""
	}
	return n.cfg.Local.Socket
}

// localService implements LocalKVOffload over a Node's registered regions.
type localService struct {
	pb.UnimplementedLocalKVOffloadServer
	n *Node
}

// region finds the caller's region: its connection's SO_PEERCRED (peerAddr) must be the
// registering process's, and the token the one the registration answered.
func (s localService) region(ctx context.Context, ref *pb.RegionRef) (*region, error) {
	p, ok := peer.FromContext(ctx)
	var who peerAddr
	if ok {
		who, ok = p.Addr.(peerAddr)
	}
	if !ok {
		return nil, status.Error(codes.PermissionDenied, "node: the local path is served only on the local socket")
	}
	r, err := s.n.regions.lookup(ref.GetId(), ref.GetToken(), who.uid, who.pid)
	if err != nil {
		s.n.log.Warn("local call refused", "caller", who.String(), "err", err)
		return nil, status.Error(codes.PermissionDenied, "node: "+err.Error())
	}
	return r, nil
}

// Offload runs the described ranges of the region as one transaction, reading them in place:
// the coordinator hashes each value in the region (admission), and the bucket store copies it
// into its aligned write buffer and hashes the copy (bucketstore.EncodeRecord), so a client
// rewriting a range meanwhile gets that key Rejected, never a record whose bytes differ from
// its checksum. The region is held until the transaction has ended: an unregistered region
// is unmapped only then (regions.release).
// Reads of a sealed memfd's mapping cannot fault (checkMemfd: it cannot shrink, and a hole
// reads as zeros), so the coordinator reads it like any other memory.
func (s localService) Offload(ctx context.Context, req *pb.LocalOffloadRequest) (*pb.OffloadResponse, error) {
	if err := s.n.waitReady(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	var id fsm.TxnID
	if len(req.TxnId) != len(id) {
		return nil, invalid("txn_id must be %d bytes, got %d", len(id), len(req.TxnId))
	}
	copy(id[:], req.TxnId)
	if err := kvoffload.CheckTxnID(id); err != nil {
		return nil, invalid("%v", err)
	}
	r, err := s.region(ctx, req.Region)
	if err != nil {
		return nil, err
	}
	lim := s.n.cfg.Txn
	if len(req.Objects) > lim.MaxBatchKeys {
		return nil, grpcError(txn.BatchKeysError(uint64(len(req.Objects)), req.Objects[lim.MaxBatchKeys].Key, lim.MaxBatchKeys))
	}
	out := make([]kvoffload.KeyResult, len(req.Objects))
	var pos []int
	var total uint64
	for i, d := range req.Objects {
		reason, code := r.bounds(d.Offset, d.Length), kvoffload.CodeInvalidValue
		if reason == "" && d.Length > uint64(lim.MaxObjectBytes) {
			reason, code = txn.ObjectTooLarge(d.Length, lim.MaxObjectBytes), kvoffload.CodeTooLarge
		}
		if reason != "" {
			out[i] = kvoffload.KeyResult{Key: d.Key, Outcome: kvoffload.Rejected, Code: code, Reason: reason}
			continue
		}
		if total += d.Length; total > uint64(lim.MaxBatchBytes) {
			return nil, grpcError(txn.BatchBytesError(total, d.Key, lim.MaxBatchBytes))
		}
		pos = append(pos, i)
	}
	objs, err := inPlace(r, req.Objects, pos)
	if err != nil {
		for _, i := range pos {
			out[i] = kvoffload.KeyResult{Key: req.Objects[i].Key, Outcome: kvoffload.Failed, Code: kvoffload.CodeCanceled, Reason: err.Error()}
		}
		return resultsPB(out), nil
	}
	defer r.release()
	s.n.payloadIn.Add(total)
	res, err := s.n.coord.BatchOffload(ctx, id, objs)
	if err != nil {
		return nil, grpcError(err)
	}
	for j, i := range pos {
		out[i] = res[j]
	}
	s.n.metrics.observeOffload(id, res, objs, time.Since(start))
	return resultsPB(out), nil
}

// inPlace takes a reference on r and returns the ranges descs[pos] as objects whose values
// alias r's mapping; the caller releases r once nothing reads them any more (after
// BatchOffload returns: the coordinator reads values only within the call).
func inPlace(r *region, descs []*pb.Desc, pos []int) ([]kvoffload.Object, error) {
	if !r.acquire() {
		return nil, fmt.Errorf("node: region %s was unregistered before the offload began; nothing was stored", r.name())
	}
	objs := make([]kvoffload.Object, len(pos))
	for j, i := range pos {
		d := descs[i]
		objs[j] = kvoffload.Object{Key: d.Key, Value: r.mem[d.Offset : d.Offset+d.Length : d.Offset+d.Length]}
	}
	return objs, nil
}

func resultsPB(res []kvoffload.KeyResult) *pb.OffloadResponse {
	out := &pb.OffloadResponse{Results: make([]*pb.KeyResult, len(res))}
	for i, r := range res {
		out.Results[i] = wire.KeyResultToPB(r)
	}
	return out
}

// Get reads and verifies the keys and copies each value into the region at its descriptor's
// offset as soon as it is verified, from a recycled read buffer, while the other reads are in
// flight. The node holds at most the reads in flight in memory; the buffer budget is taken
// for the values' bytes all the same (each distinct key once, from the reads' lookup), so
// that a node serving many readers waits rather than overcommits. The region is held for the
// call: unregistering it waits until the call ends.
func (s localService) Get(ctx context.Context, req *pb.LocalGetRequest) (*pb.LocalGetResponse, error) {
	if err := s.n.waitReady(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	r, err := s.region(ctx, req.Region)
	if err != nil {
		return nil, err
	}
	if lim := s.n.cfg.Txn.MaxBatchKeys; len(req.Keys) > lim {
		return nil, grpcError(txn.BatchKeysError(uint64(len(req.Keys)), req.Keys[lim].Key, lim))
	}
	out := make([]*pb.LocalGetResult, len(req.Keys))
	var keys []string
	var pos []int
	for i, d := range req.Keys {
		if reason := r.bounds(d.Offset, d.Length); reason != "" {
			out[i] = &pb.LocalGetResult{Status: pb.GetStatus_GET_STATUS_UNAVAILABLE, Code: pb.Code_CODE_INVALID_VALUE, Reason: reason}
			continue
		}
		keys, pos = append(keys, d.Key), append(pos, i)
	}
	buf := s.n.metrics.buffers.NewHold()
	defer buf.Release()
	if !r.acquire() {
		return nil, status.Errorf(codes.FailedPrecondition, "node: region %s was unregistered", r.name())
	}
	defer r.release()
	res := make([]kvoffload.GetResult, len(keys)) // what was answered, without values, for the metrics
	err = s.n.batchGetEach(ctx, keys, buf.Reserver(ctx), func(j int, g kvoffload.GetResult) bool {
		i := pos[j]
		out[i] = intoRegion(r, req.Keys[i], g)
		g.Value = nil
		res[j] = g
		return false
	})
	if err != nil {
		return nil, grpcError(err)
	}
	s.n.metrics.observeGets(res, time.Since(start))
	return &pb.LocalGetResponse{Results: out}, nil
}

// intoRegion copies a Found value into the region, or answers why not.
func intoRegion(r *region, d *pb.Desc, g kvoffload.GetResult) *pb.LocalGetResult {
	if g.Status != kvoffload.Found {
		return &pb.LocalGetResult{Status: wire.StatusToPB(g.Status), Code: pb.Code(g.Code), Reason: wire.Reason(g.Reason)}
	}
	size := uint64(len(g.Value))
	if size > d.Length {
		return &pb.LocalGetResult{Status: pb.GetStatus_GET_STATUS_UNAVAILABLE, Code: pb.Code_CODE_SHORT_BUFFER, Size: size,
			Reason: fmt.Sprintf("buffer of %d bytes for a value of %d bytes", d.Length, size)}
	}
	if err := safeCopy(r.mem[d.Offset:d.Offset+size], g.Value); err != nil {
		return &pb.LocalGetResult{Status: pb.GetStatus_GET_STATUS_UNAVAILABLE, Code: pb.Code_CODE_IO, Reason: wire.Reason(err.Error())}
	}
	return &pb.LocalGetResult{Status: pb.GetStatus_GET_STATUS_FOUND, Size: size}
}
