package txn

import (
	"context"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/wal"
)

// IntentLog is the write-ahead log seam (implemented by *wal.Log).
type IntentLog interface {
	// Append makes recs durable (group commit) and returns the index of the first.
	Append(recs ...wal.Record) (uint64, error)
	// AppendAsync queues recs for the next group commit.
	AppendAsync(recs ...wal.Record)
	// Sync waits until everything queued before it is durable.
	Sync() error
	// Replay visits every entry in index order.
	Replay(fn func(index uint64, rec wal.Record) error) error
	FirstIndex() uint64
	LastIndex() uint64
	// TruncateFront drops the entries before index.
	TruncateFront(index uint64) error
}

// Buckets is the data seam (implemented by *bucketstore.Store).
type Buckets interface {
	Reserve(size int64) (bucketstore.Extent, error)
	// ReserveRun reserves back-to-back extents for sizes, all or none.
	ReserveRun(sizes []int64) ([]bucketstore.Extent, error)
	// WriteRecords writes records, one pwrite per run of neighbouring extents; one error per
	// record.
	WriteRecords(recs []bucketstore.RecordWrite) []error
	Sync(buckets ...uint32) error
	Read(ext bucketstore.Extent, want bucketstore.Header) ([]byte, error)
	// ReadBatch reads and verifies records with up to depth in flight, into recycled
	// buffers when pooled (bucketstore.Store.ReadBatch).
	ReadBatch(n, depth int, pooled bool, prep bucketstore.RecordPrep, done bucketstore.RecordDone)
	Free(ext bucketstore.Extent) error
	Adopt(ext bucketstore.Extent) error
	Collect(bucket uint32, live []bucketstore.Extent) (int64, error)
	Buckets() []uint32
	// Stats measures the store (LiveBytes against the quota).
	Stats() (bucketstore.Stats, error)
}

// Meta is the replicated metadata seam: proposals go through Raft, reads come from the
// local FSM.
type Meta interface {
	// Propose applies an encoded fsm command and returns its result. An error may be
	// indeterminate: the command may still be applied later.
	Propose(ctx context.Context, cmd []byte) (*fsm.Result, error)
	// Barrier returns once the FSM has applied every entry committed before the call.
	Barrier(ctx context.Context) error
	// ReadIndex returns once the local FSM reflects every command acknowledged before the
	// call anywhere in the cluster (a no-op where the local FSM is the only replica). The
	// coordinator calls it before it answers AlreadyStored or Conflict from local metadata,
	// and before a read answers a miss.
	ReadIndex(ctx context.Context) error
	Lookup(key string) (fsm.Entry, bool)
	Generation(key string) uint64
	TxnResult(id fsm.TxnID) (*fsm.Result, bool)
	// LiveOf returns a copy of the live entries whose bytes owner holds, in any order, each
	// key once (the LRU's load relies on it); the caller owns the slice. Recovery orders the
	// entries itself (ownSorted).
	LiveOf(owner string) []fsm.Entry
}

// eachLookup is a Meta that looks up many keys at once, as fsm.FSM.LookupEach does (node's
// does): admission then takes the FSM's read lock once per batch, not twice per key.
type eachLookup interface {
	LookupEach(n int, key func(i int) string, fn func(i int, e fsm.Entry, live bool, gen uint64))
}

// Remote reads keys whose bytes another node owns (cluster mode). It returns one result per
// key, in order; an unreachable owner yields Unavailable results quickly, not a time-out.
// size is the keys' total payload size in bytes, to size the deadline.
type Remote interface {
	ReadRemote(ctx context.Context, owner string, keys []string, size int64) []kvoffload.GetResult
}

var (
	_ IntentLog = (*wal.Log)(nil)
	_ Buckets   = (*bucketstore.Store)(nil)
)
