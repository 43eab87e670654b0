package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/chaos/sim"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/nodehook"
	"github.com/kvoffload/kvoffload/node"
	"github.com/kvoffload/kvoffload/wal"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// Workload describes how payloads derive from keys, so a checker can recompute them.
type Workload struct {
	Seed      uint64
	BlockSize int
}

// Payload returns the bytes the workload offloads for key.
func (w Workload) Payload(key string) []byte { return trace.Payload(w.Seed, key, w.BlockSize) }

// Report counts what a check looked at.
type Report struct {
	MetaKeys  int // I1/I3: metadata records read back and verified
	AckedKeys int // I2: acknowledged keys found
	Evicted   int // I2 under a quota: acknowledged keys absent with their removal recorded
	Records   int // I4: records found on disk by a scan
	Checks    int
}

// CheckNode verifies I1, I2, I3, I4 and I12 on an open node at quiescence. acked lists the
// keys whose offload was acknowledged.
func CheckNode(ctx context.Context, n *node.Node, w Workload, acked []string) (Report, error) {
	return checkNode(ctx, n, w, acked, nil)
}

// CheckNodeEvicting is CheckNode for a node with a quota, whose eviction removes
// acknowledged keys: an acknowledged key may be absent, but only with its removal recorded
// in the metadata, that is its generation (fsm.FSM.Generation) advanced past ackedGen[key],
// the generation live when it was acknowledged (0 if unknown). An acknowledged key whose
// last committed version vanished without a REMOVE is still an I2 violation.
func CheckNodeEvicting(ctx context.Context, n *node.Node, w Workload, acked []string, ackedGen map[string]uint64) (Report, error) {
	if ackedGen == nil {
		ackedGen = map[string]uint64{}
	}
	return checkNode(ctx, n, w, acked, ackedGen)
}

// checkNode is CheckNode, or CheckNodeEvicting when ackedGen is not nil.
func checkNode(ctx context.Context, n *node.Node, w Workload, acked []string, ackedGen map[string]uint64) (Report, error) {
	acked = slices.Compact(slices.Sorted(slices.Values(acked))) // a shared key is acknowledged once per batch
	var rep Report
	var errs []error
	entries := map[string]fsm.Entry{}
	var keys []string
	var live int64
	parts := nodehook.Of(n)
	parts.FSM.ForEach(func(e fsm.Entry) bool {
		entries[e.Key] = e
		keys = append(keys, e.Key)
		live += e.Extent.Length
		return true
	})
	for _, k := range acked {
		switch _, ok := entries[k]; {
		case ok:
		case ackedGen != nil && parts.FSM.Generation(k) > ackedGen[k]:
			rep.Evicted++
		default:
			errs = append(errs, fmt.Errorf("I2: acknowledged key %s is not in metadata", k))
		}
	}
	rep.AckedKeys = len(acked)
	res, err := getAll(ctx, n, keys)
	if err != nil {
		return rep, fmt.Errorf("get: %w", err)
	}
	for _, r := range res {
		switch {
		case r.Status != kvoffload.Found:
			errs = append(errs, fmt.Errorf("I1: metadata for %s but read gives %s (%s)", r.Key, r.Status, r.Reason))
		case !bytes.Equal(r.Value, w.Payload(r.Key)):
			errs = append(errs, fmt.Errorf("I3: %s read back wrong bytes", r.Key))
		}
	}
	rep.MetaKeys = len(keys)
	st, err := parts.Buckets.Stats()
	if err != nil {
		return rep, err
	}
	if st.LiveBytes != live {
		errs = append(errs, fmt.Errorf("I12: live bytes %d but metadata references %d", st.LiveBytes, live))
	}
	err = parts.Buckets.Scan(func(ext bucketstore.Extent, h bucketstore.Header, err error) error {
		if err != nil {
			return nil
		}
		rep.Records++
		e, ok := entries[h.Key]
		if !ok || e.Extent != (fsm.Extent{Bucket: ext.Bucket, Offset: ext.Offset, Length: ext.Length}) {
			errs = append(errs, fmt.Errorf("I4: orphan record of %s at %+v", h.Key, ext))
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("scan: %w", err)
	}
	rep.Checks = rep.MetaKeys + rep.AckedKeys + rep.Records + 1
	return rep, errors.Join(errs...)
}

// UnresolvedIntents opens a closed node's WAL and counts INTENT records without DONE (I5).
func UnresolvedIntents(walDir string) (int, error) {
	l, _, err := wal.Open(wal.DefaultConfig(walDir))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return sim.Unresolved(l)
}

// getAll reads keys in batches under the per-request key limit.
func getAll(ctx context.Context, n *node.Node, keys []string) ([]kvoffload.GetResult, error) {
	var out []kvoffload.GetResult
	for lo := 0; lo < len(keys); lo += 1024 {
		res, err := n.BatchGet(ctx, keys[lo:min(lo+1024, len(keys))])
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	return out, nil
}
