package node

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/peer"
)

// connListener records the connections it accepts by remote address, so that a handler can
// close its caller's whole connection (closePeer). A BatchGet stream cut at the idle limit
// needs it: gRPC keeps a finished stream, and the value bytes its queued frames point at,
// until the client reads them or the connection closes, so ending the stream alone would
// leave those bytes on the node, outside the buffer budget, once per idle limit (adversarial
// review: 40 such streams left 163 MiB).
type connListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]net.Conn // by RemoteAddr().String()
}

func newConnListener(l net.Listener) *connListener {
	return &connListener{Listener: l, conns: map[string]net.Conn{}}
}

func (l *connListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l, key: c.RemoteAddr().String()}
	l.mu.Lock()
	l.conns[tc.key] = tc
	l.mu.Unlock()
	return tc, nil
}

// closePeer closes the connection of the call ctx belongs to; it reports whether there was one.
func (l *connListener) closePeer(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return false
	}
	l.mu.Lock()
	c := l.conns[p.Addr.String()]
	l.mu.Unlock()
	if c == nil {
		return false
	}
	_ = c.Close()
	return true
}

// trackedConn leaves its listener's table when closed.
type trackedConn struct {
	net.Conn
	l    *connListener
	key  string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.conns[c.key] == net.Conn(c) {
			delete(c.l.conns, c.key)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
