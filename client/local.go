package client

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/local"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/internal/wire"
)

// localMember is the shared-memory side of a member reached on a node's local socket
// (a "unix://PATH" address): its LocalKVOffload stub and the regions the Store calls copy
// through.
type localMember struct {
	kv      kvoffloadv1.LocalKVOffloadClient
	staging *staging
}

// localDialOptions connect to the socket at path (credentials/local: the node sees a Unix
// socket, so a Token may be sent without TLS).
func localDialOptions(opt Options, path string, last *atomic.Pointer[error]) []grpc.DialOption {
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			last.Store(&err)
		}
		return conn, err
	}
	return append(dialOptions(opt), grpc.WithTransportCredentials(local.NewCredentials()), grpc.WithContextDialer(dial))
}

// maxStagingBytes bounds the staging region of one Store call; a larger call streams.
const maxStagingBytes = 1 << 30

// lostRegion reports whether err is the node not knowing a region (its registration
// connection broke: a restart), which a new registration fixes.
func lostRegion(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.PermissionDenied && strings.Contains(s.Message(), "is not registered by this client")
}

// retryLost turns a lost staging region into an unknown outcome, retried with a new one.
func retryLost(err error) error {
	if lostRegion(err) {
		return status.Error(codes.Unavailable, "client: staging region lost (the node restarted?): "+status.Convert(err).Message())
	}
	return err
}

// drainTimeout bounds drainLocal.
const drainTimeout = 10 * time.Second

// drainLocal sends req, an in-place offload from the caller's region whose call failed, once
// more and waits for the answer, within drainTimeout whatever the caller's context: the node
// may still be reading the region for the failed call (a transaction, once begun, runs to its
// end), and a call with the same txn ID returns only once that one has ended (or runs the
// batch itself, if the first never arrived). So BatchOffload returns only when that
// transaction has ended and stores nothing more from the caller's values, which the caller
// may then reuse (a handler of the failed call that reaches the node late reads them only to
// find that transaction's result); its outcome stays that of the failed call (a retry with
// the same ID learns the transaction's). A node that cannot be reached fails it at once.
func drainLocal(kv kvoffloadv1.LocalKVOffloadClient, req *kvoffloadv1.LocalOffloadRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	_, _ = kv.Offload(ctx, req)
}

func regionRef(r *Region) *kvoffloadv1.RegionRef { return r.ref() }

// onRegion runs call with r's current reference; when the node does not know r (it
// restarted), r is registered again and call runs once more. The error is call's, or, if
// the registration failed, the first call's (lostRegion).
func onRegion(r *Region, call func(ref *kvoffloadv1.RegionRef) error) error {
	ref := r.ref()
	err := call(ref)
	if !lostRegion(err) {
		return err
	}
	if rerr := r.renew(ref.Id); rerr != nil {
		return err
	}
	return call(r.ref())
}

// offloadLocal is one BatchOffload attempt on the local path: descriptors of the caller's
// region when every value lies in one, else through a staging region; ok is false when no
// region could be used (then the caller streams).
func (c *Client) offloadLocal(ctx context.Context, a *attempt, id kvoffload.TxnID, objs []kvoffload.Object) (res []kvoffload.KeyResult, ok bool, err error) {
	total := 0
	for _, o := range objs {
		total += len(o.Value)
	}
	if r, offs := a.m.local.staging.reg.holding(len(objs), func(i int) []byte { return objs[i].Value }); r != nil {
		// The values are in a region of the caller's: descriptors, no copy. A region the
		// node no longer knows (it restarted) is registered again; if that fails, nothing
		// was stored and this attempt streams.
		descs := make([]*kvoffloadv1.Desc, len(objs))
		for i, o := range objs {
			descs[i] = &kvoffloadv1.Desc{Key: o.Key, Offset: uint64(offs[i]), Length: uint64(len(o.Value))}
		}
		req := &kvoffloadv1.LocalOffloadRequest{TxnId: id[:], Objects: descs}
		var resp *kvoffloadv1.OffloadResponse
		err := onRegion(r, func(ref *kvoffloadv1.RegionRef) (err error) {
			req.Region = ref
			resp, err = a.m.local.kv.Offload(ctx, req)
			return err
		})
		if lostRegion(err) {
			return nil, false, nil
		}
		if err != nil {
			drainLocal(a.m.local.kv, req)
			return nil, true, err
		}
		a.received()
		res, err = keyResults(resp, objs)
		return res, true, err
	}
	if total > maxStagingBytes {
		return nil, false, nil
	}
	r, err := a.m.local.staging.get(total)
	if err != nil {
		c.lg.Debug("no staging region; streaming", "addr", a.m.addr, "err", err)
		return nil, false, nil
	}
	descs := make([]*kvoffloadv1.Desc, len(objs))
	off := 0
	for i, o := range objs {
		copy(r.mem[off:], o.Value)
		descs[i] = &kvoffloadv1.Desc{Key: o.Key, Offset: uint64(off), Length: uint64(len(o.Value))}
		off += len(o.Value)
	}
	resp, err := a.m.local.kv.Offload(ctx, &kvoffloadv1.LocalOffloadRequest{TxnId: id[:], Region: regionRef(r), Objects: descs})
	// After a failed call the node may still be copying from r: it is unregistered (the
	// node waits for that copy) rather than reused, so a retry never stores other bytes.
	a.m.local.staging.put(r, err != nil)
	if err != nil {
		return nil, true, retryLost(err)
	}
	a.received()
	res, err = keyResults(resp, objs)
	return res, true, err
}

// getLocal is one BatchGet attempt through a staging region; ok is false when no region
// could be had. Without bufs, each key gets room for the largest value seen so far, and keys
// that did not fit are read again with their sizes.
func (c *Client) getLocal(ctx context.Context, a *attempt, keys []string, bufs [][]byte) (out []kvoffload.GetResult, ok bool, err error) {
	lengths := make([]int, len(keys))
	for i := range keys {
		if bufs != nil {
			lengths[i] = len(bufs[i])
		} else {
			lengths[i] = int(c.valueHint.Load())
		}
	}
	out, ok, err = c.getLocalOnce(ctx, a, keys, lengths, bufs)
	if err != nil || !ok || bufs != nil {
		return out, ok, err
	}
	var again []int
	for i, g := range out {
		if g.Status == kvoffload.ShortBuffer {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return out, true, nil
	}
	ks, ls := make([]string, len(again)), make([]int, len(again))
	for j, i := range again {
		ks[j], ls[j] = keys[i], out[i].Size
		c.valueHint.Store(max(c.valueHint.Load(), int64(out[i].Size)))
	}
	more, ok, err := c.getLocalOnce(ctx, a, ks, ls, nil)
	if err != nil || !ok {
		return more, ok, err
	}
	for j, i := range again {
		out[i] = more[j]
	}
	return out, true, nil
}

func (c *Client) getLocalOnce(ctx context.Context, a *attempt, keys []string, lengths []int, bufs [][]byte) ([]kvoffload.GetResult, bool, error) {
	total := 0
	descs := make([]*kvoffloadv1.Desc, len(keys))
	for i, k := range keys {
		descs[i] = &kvoffloadv1.Desc{Key: k, Offset: uint64(total), Length: uint64(lengths[i])}
		total += lengths[i]
	}
	if total > maxStagingBytes {
		return nil, false, nil
	}
	r, err := a.m.local.staging.get(total)
	if err != nil {
		c.lg.Debug("no staging region; streaming", "addr", a.m.addr, "err", err)
		return nil, false, nil
	}
	resp, err := a.m.local.kv.Get(ctx, &kvoffloadv1.LocalGetRequest{Region: regionRef(r), Keys: descs})
	if err != nil {
		a.m.local.staging.put(r, true)
		return nil, true, retryLost(err)
	}
	a.received()
	out, err := localResults(resp, descs, r.mem, bufs)
	a.m.local.staging.put(r, false)
	return out, true, err
}

// localResults converts a LocalGet answer, copying each Found value out of mem (into
// bufs[i] when given, else a new slice).
func localResults(resp *kvoffloadv1.LocalGetResponse, descs []*kvoffloadv1.Desc, mem []byte, bufs [][]byte) ([]kvoffload.GetResult, error) {
	if len(resp.GetResults()) != len(descs) {
		return nil, fmt.Errorf("%w: %d results for %d keys", kvoffload.ErrProtocol, len(resp.GetResults()), len(descs))
	}
	out := make([]kvoffload.GetResult, len(descs))
	for i, g := range resp.GetResults() {
		d := descs[i]
		out[i], _ = fromLocal(g, d.Key)
		if out[i].Status != kvoffload.Found {
			continue
		}
		if g.GetSize() > d.Length {
			return nil, fmt.Errorf("%w: key %q: a value of %d bytes for a descriptor of %d", kvoffload.ErrProtocol, d.Key, g.GetSize(), d.Length)
		}
		src := mem[d.Offset : d.Offset+g.GetSize()]
		if bufs != nil {
			out[i].Value = bufs[i][:copy(bufs[i], src)]
		} else {
			out[i].Value = append([]byte(nil), src...)
		}
	}
	return out, nil
}

// fromLocal is one LocalGetResult as a GetResult (Value left to the caller).
func fromLocal(g *kvoffloadv1.LocalGetResult, key string) (kvoffload.GetResult, bool) {
	if g.GetCode() == kvoffloadv1.Code_CODE_SHORT_BUFFER {
		return kvoffload.GetResult{Key: key, Status: kvoffload.ShortBuffer, Size: int(g.GetSize()), Code: kvoffload.CodeShortBuffer, Reason: g.GetReason()}, true
	}
	st, ok := wire.StatusFromPB(g.GetStatus())
	r := kvoffload.GetResult{Key: key, Status: st, Code: kvoffload.Code(g.GetCode()), Reason: g.GetReason()}
	if st == kvoffload.Found {
		r.Size, r.Code = int(g.GetSize()), kvoffload.CodeNone
	} else if r.Code == kvoffload.CodeNone {
		r.Code = kvoffload.CodeUnavailable
	}
	return r, ok
}
