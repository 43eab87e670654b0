package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/kvoffload/kvoffload/internal/wire"
)

// Options shape a Client. The zero value is usable: every zero field takes its default
// (DefaultOptions), so set only what differs.
type Options struct {
	// ChunkSize is the most value bytes in one gRPC message, in bytes (default and most 1
	// MiB, the protocol's chunk size).
	ChunkSize int
	// DialTimeout bounds Dial's connection attempt to each address (default 2 s).
	DialTimeout time.Duration
	// RetryBackoff is the wait before the first retry (default 50 ms); it doubles on each
	// further retry up to MaxBackoff, with ±25% jitter.
	RetryBackoff time.Duration
	// MaxBackoff caps the wait between retries (default 2 s).
	MaxBackoff time.Duration
	// MaxAttempts bounds the attempts of one call; 0 (the default) retries until the call's
	// context ends (or CallTimeout passes).
	MaxAttempts int
	// MaxBatchKeys is the most keys one call may name (default 4096, the store's own default
	// limit): a larger call fails with kvoffload.ErrTooLarge before anything is sent. It counts
	// every key, those the client answers itself (CheckKey) included, as the store counts
	// them; set it to the members' MaxBatchKeys if they were configured otherwise. It also
	// sizes the client's gRPC message limit: what a call of that many keys of 1 KiB (the
	// longest key a member accepts) needs, besides one chunk.
	MaxBatchKeys int
	// CallTimeout is the deadline of a call whose context has none (default 30 s), so a call
	// to a cluster that is down returns (ErrIndeterminate or ErrUnavailable) instead of
	// retrying for ever; a negative value disables it. A context with a deadline is used as
	// it is.
	CallTimeout time.Duration
	// StallTimeout is how long one attempt may go without progress before it is cancelled
	// and retried on the next member (default 2 s; must be positive). Progress is a message
	// received, a message the transport accepted for sending, or an answer from the member to
	// the liveness probe the client sends while an attempt waits (a gRPC health check, see
	// the package doc). So a member that stops answering while its TCP connection stays open
	// (SIGSTOP, a long GC pause, a frozen VM) is left after about StallTimeout, while a live
	// member that takes long to answer, or a large transfer that keeps moving, is not cut off:
	// the total time of an attempt is bounded only by the caller's context. The same value is
	// the gRPC keepalive timeout (how long a keepalive ping may go unanswered).
	StallTimeout time.Duration
	// TLS, when set, secures the connections with TLS using this configuration (it is cloned;
	// an empty ServerName is taken from the address). nil (the default) connects in plaintext.
	TLS *tls.Config
	// Token, when set, is sent with every call as gRPC per-RPC credentials, in the metadata
	// "authorization: Bearer <Token>" (RFC 6750 §2.1; the token must have its b64token syntax).
	// It requires TLS, since a token sent in plaintext can be read by anyone on the path,
	// unless InsecureToken is set.
	Token string
	// InsecureToken allows Token over a plaintext connection (for tests and loopback
	// set-ups only).
	InsecureToken bool
	// Logger receives retries and failovers (Debug) and transaction renewals (Warn); nil
	// discards them.
	Logger *slog.Logger
	// OnAttempt, when set, is called after every attempt of every call (the metrics hook):
	// with the operation, the member, how long the attempt took and its error (nil on
	// success). It runs on the calling goroutine and must not block.
	OnAttempt func(Attempt)
	// NoPrecheck skips the round trip that asks a member, before a BatchOffload uploads, which
	// keys it already stores with the same size and checksum (reported AlreadyStored, their
	// payloads not sent). Default false: the precheck runs.
	NoPrecheck bool
	// GRPCOptions are appended to the client's own dial options (interceptors, a custom
	// dialer, stats handlers); they win where they set the same thing.
	GRPCOptions []grpc.DialOption
}

// Attempt describes one attempt of a call, for Options.OnAttempt.
type Attempt struct {
	Op      string // "BatchOffload", "BatchGet", "BatchExists", "Remove", "Stats", "Status"
	Addr    string // the member's address
	N       int    // 1 for the first attempt of the call
	Elapsed time.Duration
	Err     error
}

// DefaultOptions returns the default options.
func DefaultOptions() Options {
	return Options{
		ChunkSize:    1 << 20,
		DialTimeout:  2 * time.Second,
		RetryBackoff: 50 * time.Millisecond,
		MaxBackoff:   2 * time.Second,
		StallTimeout: 2 * time.Second,
		CallTimeout:  30 * time.Second,
		MaxBatchKeys: 4096,
	}
}

// withDefaults fills o's zero fields from DefaultOptions.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.ChunkSize == 0 {
		o.ChunkSize = d.ChunkSize
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = d.DialTimeout
	}
	if o.RetryBackoff == 0 {
		o.RetryBackoff = d.RetryBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = max(d.MaxBackoff, o.RetryBackoff)
	}
	if o.StallTimeout == 0 {
		o.StallTimeout = d.StallTimeout
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = d.CallTimeout
	}
	if o.MaxBatchKeys == 0 {
		o.MaxBatchKeys = d.MaxBatchKeys
	}
	return o
}

// maxChunkSize bounds ChunkSize: the protocol's chunk size, which the members' message
// limits allow for besides a batch's keys (wire.MaxMessageBytes).
const maxChunkSize = wire.ChunkBytes

// Validate reports every invalid field, after zero fields took their defaults.
func (o Options) Validate() error {
	o = o.withDefaults()
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
	if o.MaxBatchKeys < 0 {
		errs = append(errs, fmt.Errorf("client: MaxBatchKeys %d < 0", o.MaxBatchKeys))
	}
	if o.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("client: MaxAttempts %d < 0", o.MaxAttempts))
	}
	if o.StallTimeout <= 0 {
		errs = append(errs, errors.New("client: StallTimeout must be positive"))
	}
	if o.TLS != nil && o.TLS.MinVersion != 0 && o.TLS.MinVersion < tls.VersionTLS12 {
		errs = append(errs, fmt.Errorf("client: TLS.MinVersion %s is below TLS 1.2, which gRPC requires", tls.VersionName(o.TLS.MinVersion)))
	}
	if o.Token != "" {
		if !isB64Token(o.Token) {
			errs = append(errs, errors.New("client: Token is not an RFC 6750 b64token (letters, digits and -._~+/, then optional '=' padding)"))
		}
		if o.TLS == nil && !o.InsecureToken {
			errs = append(errs, errors.New("client: Token without TLS would be sent in plaintext; set TLS, or InsecureToken on purpose"))
		}
	}
	return errors.Join(errs...)
}

// isB64Token reports whether s has the b64token syntax of RFC 6750 §2.1:
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isB64Token(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		b := s[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '.' || b == '_' || b == '~' || b == '+' || b == '/') {
			break
		}
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}
