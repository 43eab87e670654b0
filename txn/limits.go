package txn

import (
	"fmt"

	"github.com/kvoffload/kvoffload/bucketstore"
)

// batchLimitError is the request-level refusal of a batch over one of Config's limits. It
// names the size reached, the key at which it was reached, the limit and its value, e.g.
// `batch of 4294971393 bytes at key "k7" exceeds MaxBatchBytes 1073741824`, so an operator
// or a client can tell which request and which setting without reading the source. A key
// longer than any member accepts (bucketstore.MaxKeyLen) is named by its first bytes.
func batchLimitError(size uint64, unit, key, limit string, value int64) error {
	if len(key) > bucketstore.MaxKeyLen {
		key = key[:bucketstore.MaxKeyLen] + "..."
	}
	return fmt.Errorf("%w: batch of %d %s at key %q exceeds %s %d", ErrBatchTooLarge, size, unit, key, limit, value)
}

// MaxBatchKeyBytes is the most bytes the keys of one batch offload may hold in all:
// MaxBatchKeys keys of MaxKeyBytes. The answer to a batch names every key, and the message
// limits are sized for keys within the limits (internal/wire MaxMessageBytes), so a batch of
// longer keys (each of which alone is only Rejected) is refused whole beyond it
// (BatchKeyBytesError), before anything is written: its answer could not be sent.
func (c Config) MaxBatchKeyBytes() int64 { return int64(c.MaxBatchKeys) * int64(c.MaxKeyBytes) }

// BatchKeyBytesError refuses a batch whose keys hold n bytes in all, reached at key, over
// MaxBatchKeyBytes (value).
func BatchKeyBytesError(n uint64, key string, value int64) error {
	return batchLimitError(n, "key bytes", key, "MaxBatchKeys x MaxKeyBytes", value)
}

// BatchKeysError refuses a batch whose keys number n, reached at key, over MaxBatchKeys
// (value); the gRPC service uses it while a batch is still arriving.
func BatchKeysError(n uint64, key string, value int) error {
	return batchLimitError(n, "keys", key, "MaxBatchKeys", int64(value))
}

// BatchBytesError refuses a batch whose payloads total n bytes, reached at key, over
// MaxBatchBytes (value).
func BatchBytesError(n uint64, key string, value int64) error {
	return batchLimitError(n, "bytes", key, "MaxBatchBytes", value)
}

// ObjectTooLarge is the per-key Rejected reason of an object of size bytes over
// MaxObjectBytes (value).
func ObjectTooLarge(size uint64, value int64) string {
	return fmt.Sprintf("too large: %d bytes exceeds MaxObjectBytes %d", size, value)
}

// CheckKeys refuses a request naming keys (BatchExists) on a closed or failed coordinator, or
// over MaxBatchKeys (BatchKeysError).
func (c *Coordinator) CheckKeys(keys []string) error {
	if err := c.Usable(); err != nil {
		return err
	}
	if len(keys) > c.cfg.MaxBatchKeys {
		return BatchKeysError(uint64(len(keys)), keys[c.cfg.MaxBatchKeys], c.cfg.MaxBatchKeys)
	}
	return nil
}
