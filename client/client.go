package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/kvoffload/kvoffload"
	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/internal/transport"
	"github.com/kvoffload/kvoffload/internal/wire"
)

// Client is a connection to a kvoffload cluster through any of its members. It is safe for
// concurrent use.
type Client struct {
	opt     Options
	lg      *slog.Logger
	members []*member
	cur     atomic.Int64 // index of the member calls go to
	closed  atomic.Bool
	// epoch is the origin of the monotonic times the stall watch keeps (see stall.go).
	epoch time.Time
	// bg ends with Close; liveness probes run under it.
	bg     context.Context
	stopBG context.CancelFunc
	// valueHint is the room, in bytes, a local BatchGet gives each key: the largest value
	// this client has offloaded or read (at least minValueHint).
	valueHint atomic.Int64
}

// minValueHint is the first room a local BatchGet gives each key.
const minValueHint = 64 << 10

// member is one address the client may talk to.
type member struct {
	addr   string
	cc     *grpc.ClientConn
	kv     kvoffloadv1.KVOffloadClient
	health healthpb.HealthClient // the liveness probe (stall.go)
	// dialErr is the last error connecting to addr, for Dial's error message.
	dialErr *atomic.Pointer[error]
	// heard is when the member last showed it is alive (a message received or a probe
	// answered), in nanoseconds since Client.epoch.
	heard   atomic.Int64
	probing atomic.Bool // a liveness probe is in flight
	// noPrecheck: the member answered Precheck Unimplemented (it predates it).
	noPrecheck atomic.Bool
	local      *localMember // a "unix://PATH" address: the shared-memory path (local.go)
}

// recordingDialer dials TCP and keeps the last error in last.
func recordingDialer(last *atomic.Pointer[error]) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			last.Store(&err)
		}
		return conn, err
	}
}

// Dial connects to a cluster through the first reachable address with the default options.
func Dial(ctx context.Context, addrs ...string) (*Client, error) {
	return DialOptions(ctx, DefaultOptions(), addrs...)
}

// DialOptions connects to a cluster through the first of addrs (host:port of members' API
// listeners, or "unix://PATH" for a node's local socket on this host: calls to that member
// move values through shared memory, docs/design.md "The local path") that accepts a connection within Options.DialTimeout; the other addresses are
// failover targets. Zero fields of opt take their defaults. It fails with ErrUnreachable
// when none does, and with the context's error when ctx ends first.
func DialOptions(ctx context.Context, opt Options, addrs ...string) (*Client, error) {
	opt = opt.withDefaults()
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, ErrNoAddress
	}
	lg := opt.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	c := &Client{opt: opt, lg: lg.With("pkg", "client"), epoch: time.Now()}
	c.bg, c.stopBG = context.WithCancel(context.Background())
	c.valueHint.Store(minValueHint)
	for _, a := range addrs {
		if localPath(a) == "" && !strings.Contains(a, "://") {
			if _, _, err := net.SplitHostPort(a); err != nil {
				_ = c.closeConns()
				return nil, fmt.Errorf("%w: client: address %q is not host:port (a member's --api-addr, port included): %w", kvoffload.ErrInvalidArgument, a, err)
			}
		}
		dialErr := new(atomic.Pointer[error])
		target, dos := a, append(dialOptions(opt), grpc.WithContextDialer(recordingDialer(dialErr)))
		path := localPath(a)
		if path != "" {
			target, dos = "passthrough:///local", localDialOptions(opt, path, dialErr)
		}
		cc, err := grpc.NewClient(target, dos...)
		if err != nil {
			_ = c.closeConns()
			return nil, fmt.Errorf("client: address %q: %w", a, err)
		}
		m := &member{addr: a, cc: cc, dialErr: dialErr,
			kv: kvoffloadv1.NewKVOffloadClient(cc), health: healthpb.NewHealthClient(cc)}
		if path != "" {
			m.local = &localMember{kv: kvoffloadv1.NewLocalKVOffloadClient(cc), staging: &staging{reg: &registrar{path: path}}}
		}
		c.members = append(c.members, m)
	}
	var errs []error
	for i, m := range c.members {
		err := waitReady(ctx, m, opt.DialTimeout)
		if err == nil {
			c.cur.Store(int64(i))
			c.lg.Debug("connected", "addr", m.addr)
			return c, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", m.addr, err))
		if ctx.Err() != nil {
			_ = c.closeConns()
			return nil, fmt.Errorf("client: dial %s: %w", strings.Join(addrs, ","), ctx.Err())
		}
	}
	_ = c.closeConns()
	return nil, fmt.Errorf("%w: %w", ErrUnreachable, errors.Join(errs...))
}

// keepaliveTime is the idle time after which the transport pings the member: the smallest
// interval grpc-go allows (WithKeepaliveParams raises anything below 10 s to 10 s,
// google.golang.org/grpc dialoptions.go). Stalls within a call are found sooner, by the stall
// watch (stall.go); keepalive closes idle connections to a member that stopped answering.
// The server's keepalive.EnforcementPolicy must permit it: MinTime at most 10 s and
// PermitWithoutStream true, or it ends the connection with GOAWAY "too_many_pings".
const keepaliveTime = 10 * time.Second

// dialOptions are the gRPC options of every member's connection. The message limit is the
// largest message a call of MaxBatchKeys keys of the longest key any member accepts needs
// (wire.MaxMessageBytes), the limit the members derive from their own limits.
func dialOptions(opt Options) []grpc.DialOption {
	limit := wire.MaxMessageBytes(opt.MaxBatchKeys, wire.MaxKeyBytes)
	creds := insecure.NewCredentials()
	if opt.TLS != nil {
		creds = credentials.NewTLS(opt.TLS)
	}
	dos := append(transport.DialOptions(),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(limit), grpc.MaxCallRecvMsgSize(limit)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: keepaliveTime, Timeout: opt.StallTimeout, PermitWithoutStream: true,
		}),
		// Reconnection to a member paced as the client's own retries (up to MaxBackoff), not by
		// gRPC's default backoff, which grows to two minutes: a member back from an outage was
		// otherwise out of reach for as long (TestReconnectWithinMaxBackoff).
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: min(opt.RetryBackoff, opt.MaxBackoff), Multiplier: 1.6, Jitter: 0.2, MaxDelay: opt.MaxBackoff,
		}, MinConnectTimeout: opt.DialTimeout}),
	)
	if opt.Token != "" {
		dos = append(dos, grpc.WithPerRPCCredentials(bearer{token: opt.Token, secure: !opt.InsecureToken}))
	}
	return append(dos, opt.GRPCOptions...)
}

// bearer sends a token as "authorization: Bearer <token>" (RFC 6750 §2.1) with every call.
type bearer struct {
	token  string
	secure bool // refuse to send it over a connection without transport security
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }

// waitReady connects m and waits until it is ready, fails, or timeout passes.
func waitReady(ctx context.Context, m *member, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m.cc.Connect()
	for {
		s := m.cc.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return connectError(ctx, m)
		}
		if !m.cc.WaitForStateChange(ctx, s) {
			return fmt.Errorf("not connected after %s: %w", timeout, ctx.Err())
		}
	}
}

// connectError says why m could not be connected: what answered at its address (nothing, a
// host that does not resolve, an HTTP server, a server that wants TLS: transport.WhatAnswered),
// from the connection's own error, which a call without wait-for-ready returns at once.
func connectError(ctx context.Context, m *member) error {
	err := errors.New("connection failed")
	if p := m.dialErr.Load(); p != nil {
		err = *p
	} else if _, cerr := m.health.Check(ctx, &healthpb.HealthCheckRequest{}); cerr != nil {
		err = cerr
	}
	if m.local != nil {
		return err // a unix socket: the dial error names the path and the cause
	}
	return errors.New(transport.WhatAnswered(ctx, m.addr, err))
}

// checkKeys refuses a call naming n keys, keyAt(i) the i-th, over Options.MaxBatchKeys.
func (c *Client) checkKeys(op string, n int, keyAt func(int) string) error {
	if lim := c.opt.MaxBatchKeys; n > lim {
		return fmt.Errorf("%w: %s: batch of %d keys at key %q exceeds MaxBatchKeys %d", kvoffload.ErrTooLarge, op, n, keyAt(lim), lim)
	}
	return nil
}

// callContext gives a call without a deadline Options.CallTimeout.
func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || c.opt.CallTimeout < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.opt.CallTimeout)
}

// Addr is the address calls currently go to.
func (c *Client) Addr() string { return c.members[c.cur.Load()].addr }

// Close closes the connections. Calls in progress fail; later calls return ErrClosed.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.closeConns()
}

func (c *Client) closeConns() error {
	c.stopBG()
	var errs []error
	for _, m := range c.members {
		errs = append(errs, m.cc.Close())
		if m.local != nil {
			m.local.staging.close()
		}
	}
	return errors.Join(errs...)
}

// A Client is a kvoffload.Store: the remote implementation of the one API (docs/api.md).
var _ kvoffload.Store = (*Client)(nil)
