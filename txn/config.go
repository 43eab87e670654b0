package txn

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvoffload/kvoffload/bucketstore"
)

// Config holds the coordinator's identity and limits.
type Config struct {
	// NodeID is written as the owner of every key this coordinator commits.
	NodeID string
	// MaxKeyBytes is the longest key accepted, in bytes.
	MaxKeyBytes int
	// MaxObjectBytes is the largest payload accepted, in bytes.
	MaxObjectBytes int64
	// MaxBatchKeys is the most objects in one batch.
	MaxBatchKeys int
	// MaxBatchBytes is the most payload bytes in one batch.
	MaxBatchBytes int64
	// MaxInFlight is the most transactions writing at once; further batches wait for a slot
	// (back-pressure) until their context ends, and are then Rejected.
	MaxInFlight int
	// Capacity is the bucket store's quota in bytes (0: none). When it is reached, the least
	// recently used keys this node owns are evicted to make room (docs/cases.md C10).
	Capacity int64
	// CommitTimeout bounds one Raft proposal.
	CommitTimeout time.Duration
	// MaxLease caps a BatchExists lease: a longer one is shortened to it, so no client can
	// pin keys against eviction indefinitely.
	MaxLease time.Duration
	// ReadIndexTimeout bounds each Meta.ReadIndex (cluster members only) of a read confirming
	// a miss (past it the key is Unavailable from BatchGet, Unknown from BatchExists).
	ReadIndexTimeout time.Duration
	// OffloadCatchUpTimeout bounds the catch-up at the start of a batch offload instead
	// (at least ReadIndexTimeout): long enough to ride out one leader election, since a
	// follower's forwarded read index moves to the new leader (internal/forward) once it stops
	// following a silent one (its heartbeat timeout, 1 s by default), so a batch that
	// arrives as the leader fails waits for the new one instead of failing and being sent,
	// perhaps, to the failed leader.
	OffloadCatchUpTimeout time.Duration
	// MaxBufferedBytes bounds the value bytes the node's gRPC service holds in memory at once
	// across all requests: BatchOffload's reassembled objects and BatchGet's results, each
	// held until its response is sent. A request that would go over it waits for bytes to be
	// released (back-pressure, until its context ends) rather than failing. 0 means twice
	// MaxBatchBytes. The coordinator itself does not use it.
	MaxBufferedBytes int64
	// ReadsInFlight is the most record reads one BatchGet keeps in flight on this node's
	// disk (0 means 32): a batch of 64 blocks, one request's prefix, is read with the
	// device's queue kept busy instead of one pread after another. 32 is where the disks this
	// was measured on reach their random-read limit (docs/benchmarks.md).
	ReadsInFlight int
	// TruncateEvery is how many WAL entries may accumulate before resolved history is
	// dropped from the front of the log.
	TruncateEvery uint64
	// Logger receives the coordinator's logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the default limits for node id.
func DefaultConfig(id string) Config {
	return Config{
		NodeID:                id,
		MaxKeyBytes:           1024,
		MaxObjectBytes:        64 << 20,
		MaxBatchKeys:          4096,
		MaxBatchBytes:         1 << 30,
		MaxInFlight:           64,
		CommitTimeout:         10 * time.Second,
		ReadIndexTimeout:      time.Second,
		OffloadCatchUpTimeout: 2 * time.Second,
		MaxLease:              10 * time.Minute,
		MaxBufferedBytes:      2 << 30,
		ReadsInFlight:         32,
		TruncateEvery:         4096,
	}
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("txn: NodeID is empty"))
	}
	if c.MaxKeyBytes < 1 || c.MaxKeyBytes > bucketstore.MaxKeyLen {
		errs = append(errs, fmt.Errorf("txn: MaxKeyBytes %d out of range [1, %d] (the bucket record's limit)", c.MaxKeyBytes, bucketstore.MaxKeyLen))
	}
	if c.MaxObjectBytes < 1 || c.MaxObjectBytes > 1<<32-1 {
		errs = append(errs, fmt.Errorf("txn: MaxObjectBytes %d out of range [1, 4 GiB)", c.MaxObjectBytes))
	}
	if c.ReadsInFlight < 0 {
		errs = append(errs, fmt.Errorf("txn: ReadsInFlight %d < 0", c.ReadsInFlight))
	}
	if c.MaxBatchKeys < 1 {
		errs = append(errs, fmt.Errorf("txn: MaxBatchKeys %d < 1", c.MaxBatchKeys))
	}
	if c.MaxBatchBytes < c.MaxObjectBytes {
		errs = append(errs, fmt.Errorf("txn: MaxBatchBytes %d < MaxObjectBytes %d", c.MaxBatchBytes, c.MaxObjectBytes))
	}
	if c.MaxInFlight < 1 {
		errs = append(errs, fmt.Errorf("txn: MaxInFlight %d < 1", c.MaxInFlight))
	}
	if c.MaxBufferedBytes < 0 {
		errs = append(errs, fmt.Errorf("txn: MaxBufferedBytes %d is negative", c.MaxBufferedBytes))
	}
	if c.Capacity < 0 {
		errs = append(errs, errors.New("txn: Capacity must not be negative"))
	}
	if c.CommitTimeout <= 0 {
		errs = append(errs, errors.New("txn: CommitTimeout must be positive"))
	}
	if c.MaxLease <= 0 {
		errs = append(errs, errors.New("txn: MaxLease must be positive"))
	}
	if c.ReadIndexTimeout <= 0 {
		errs = append(errs, errors.New("txn: ReadIndexTimeout must be positive"))
	}
	if c.TruncateEvery < 1 {
		errs = append(errs, errors.New("txn: TruncateEvery must be positive"))
	}
	return errors.Join(errs...)
}
