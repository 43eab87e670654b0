package client

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Options shape a Client. Start from DefaultOptions.
type Options struct {
	// ChunkSize is the most value bytes in one gRPC message, in bytes (default 1 MiB, the
	// protocol's chunk size). The client's gRPC message limits are ChunkSize + 8 MiB.
	ChunkSize int
	// DialTimeout bounds Dial's connection attempt to each address (default 2 s).
	DialTimeout time.Duration
	// RetryBackoff is the wait before the first retry (default 50 ms); it doubles on each
	// further retry up to MaxBackoff, with ±25% jitter.
	RetryBackoff time.Duration
	// MaxBackoff caps the wait between retries (default 2 s).
	MaxBackoff time.Duration
	// MaxAttempts bounds the attempts of one call; 0 (the default) retries until the call's
	// context ends.
	MaxAttempts int
	// Logger receives retries and failovers (Debug) and transaction renewals (Warn); nil
	// discards them.
	Logger *slog.Logger
}

// DefaultOptions returns the default options.
func DefaultOptions() Options {
	return Options{
		ChunkSize:    1 << 20,
		DialTimeout:  2 * time.Second,
		RetryBackoff: 50 * time.Millisecond,
		MaxBackoff:   2 * time.Second,
	}
}

// maxChunkSize bounds ChunkSize: the protocol promises messages of about 1 MiB, and servers
// accept messages of 2 MiB.
const maxChunkSize = 1 << 20

// messageSlack is what a message may hold besides one chunk of value bytes: the keys and
// results of the largest batch (4096 keys of up to 1 KiB).
const messageSlack = 8 << 20

// Validate reports every invalid field.
func (o Options) Validate() error {
	var errs []error
	if o.ChunkSize < 1 || o.ChunkSize > maxChunkSize {
		errs = append(errs, fmt.Errorf("client: ChunkSize %d out of range [1, %d]", o.ChunkSize, maxChunkSize))
	}
	if o.DialTimeout <= 0 {
		errs = append(errs, errors.New("client: DialTimeout must be positive"))
	}
	if o.RetryBackoff <= 0 {
		errs = append(errs, errors.New("client: RetryBackoff must be positive"))
	}
	if o.MaxBackoff < o.RetryBackoff {
		errs = append(errs, fmt.Errorf("client: MaxBackoff %s < RetryBackoff %s", o.MaxBackoff, o.RetryBackoff))
	}
	if o.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("client: MaxAttempts %d < 0", o.MaxAttempts))
	}
	return errors.Join(errs...)
}
