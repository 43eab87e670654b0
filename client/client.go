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
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// Client is a connection to a kvoffload cluster through any of its members. It is safe for
// concurrent use.
type Client struct {
	opt     Options
	lg      *slog.Logger
	members []member
	cur     atomic.Int64 // index of the member calls go to
	closed  atomic.Bool
}

// member is one address the client may talk to.
type member struct {
	addr string
	cc   *grpc.ClientConn
	kv   kvoffloadv1.KVOffloadClient
	cl   kvoffloadv1.ClusterClient
	// dialErr is the last error connecting to addr, for Dial's error message.
	dialErr *atomic.Pointer[error]
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

// Dial connects to a cluster through the first reachable address with DefaultOptions.
func Dial(ctx context.Context, addrs ...string) (*Client, error) {
	return DialOptions(ctx, DefaultOptions(), addrs...)
}

// DialOptions connects to a cluster through the first of addrs (host:port of members' API
// listeners) that accepts a connection within Options.DialTimeout; the other addresses are
// failover targets. It fails with ErrUnreachable when none does, and with the context's error
// when ctx ends first.
func DialOptions(ctx context.Context, opt Options, addrs ...string) (*Client, error) {
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
	c := &Client{opt: opt, lg: lg.With("pkg", "client")}
	limit := opt.ChunkSize + messageSlack
	for _, a := range addrs {
		dialErr := new(atomic.Pointer[error])
		cc, err := grpc.NewClient(a,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(recordingDialer(dialErr)),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(limit), grpc.MaxCallRecvMsgSize(limit)))
		if err != nil {
			_ = c.closeConns()
			return nil, fmt.Errorf("client: address %q: %w", a, err)
		}
		c.members = append(c.members, member{addr: a, cc: cc, dialErr: dialErr,
			kv: kvoffloadv1.NewKVOffloadClient(cc), cl: kvoffloadv1.NewClusterClient(cc)})
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

// waitReady connects m and waits until it is ready, fails, or timeout passes.
func waitReady(ctx context.Context, m member, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m.cc.Connect()
	for {
		s := m.cc.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			if p := m.dialErr.Load(); p != nil {
				return *p
			}
			return errors.New("connection failed")
		}
		if !m.cc.WaitForStateChange(ctx, s) {
			return fmt.Errorf("not connected after %s: %w", timeout, ctx.Err())
		}
	}
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
	var errs []error
	for _, m := range c.members {
		errs = append(errs, m.cc.Close())
	}
	return errors.Join(errs...)
}
