//go:build chaos

package chaos

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// tcpProxy forwards every connection it accepts to target. Blackholed, it stops moving bytes
// in both directions on every connection, old and new, the way a network that drops packets
// stalls TCP: nothing is lost or reordered, and nothing arrives until the proxy is healed
// (by then the endpoints may have given up and closed the connection).
type tcpProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	open   chan struct{} // closed while traffic flows; replaced when blackholed
	conns  map[net.Conn]struct{}
	shut   chan struct{} // closed by close
	closed bool
	wg     sync.WaitGroup
}

// startProxy listens on a free 127.0.0.1 port in front of target; a cleanup closes it.
func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, open: make(chan struct{}), shut: make(chan struct{}),
		conns: map[net.Conn]struct{}{}}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

// blackhole stops (true) or resumes (false) all traffic through the proxy.
func (p *tcpProxy) blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		if on {
			p.open = make(chan struct{})
		}
	default:
		if !on {
			close(p.open)
		}
	}
}

// pass waits until traffic may flow; false once the proxy is closed.
func (p *tcpProxy) pass() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-p.shut:
		return false
	}
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track registers c so close can end it; false (and c closed) if the proxy is closed.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// serve connects c to the target once traffic may flow, and copies both ways until both
// directions end or one fails.
func (p *tcpProxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	if !p.pass() {
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(up) {
		return
	}
	defer p.untrack(up)
	errc := make(chan error, 2)
	p.wg.Add(2)
	go func() { defer p.wg.Done(); errc <- p.copy(up, c) }()
	go func() { defer p.wg.Done(); errc <- p.copy(c, up) }()
	for range 2 {
		if err := <-errc; err != nil {
			return
		}
	}
}

// copy moves bytes from src to dst, holding each read back while the proxy is blackholed.
// At the end of src it half-closes dst and returns nil.
func (p *tcpProxy) copy(dst, src net.Conn) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return net.ErrClosed
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			if tc, ok := dst.(*net.TCPConn); ok {
				return tc.CloseWrite()
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (p *tcpProxy) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.shut)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
