package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"golang.org/x/sys/unix"
)

// The local socket carries two kinds of connection, told apart by their first four bytes:
// gRPC (HTTP/2's preface starts "PRI ") and registration connections, whose messages are
//
//	register:   "KVR1", size (8 bytes, little endian), with one memfd as SCM_RIGHTS
//	unregister: "KVU1", region ID (16 bytes)
//
// each answered by one status byte: 0 and, for register, the region ID and token (16 bytes
// each); or 1, a length (2 bytes, little endian) and an error message of at most maxErrMsg
// bytes. Every region of a registration connection is unregistered when it closes
// (docs/design.md "The local path"). This is the one statement of these bytes: the Go client
// (client/region.go) and the Python one (python/src/kvoffload/local.py) speak them.
const (
	magicRegister   = "KVR1"
	magicUnregister = "KVU1"
	magicHTTP2      = "PRI "
	// firstBytesTimeout bounds the wait for a new connection's first four bytes, and for the
	// rest of a registration message once its first bytes arrived (the wait between messages
	// is not bounded: a region lives while its connection is open).
	firstBytesTimeout = 5 * time.Second

	maxErrMsg = 1 << 10
)

// maxLocalConns bounds the connections the local socket holds at once (gRPC and
// registration together); one over it is closed at once, so a client opening connections
// without end cannot take every file descriptor of the node (TestLocalConnectionCap). A
// variable so that a test can lower it.
var maxLocalConns = 4096

// peerAddr is a local connection's remote address: its SO_PEERCRED.
type peerAddr struct{ uid, pid int32 }

func (peerAddr) Network() string  { return "unix" } // what credentials/local checks
func (a peerAddr) String() string { return fmt.Sprintf("uid=%d,pid=%d", a.uid, a.pid) }

// prefixConn replays bytes already read before the connection's own.
type prefixConn struct {
	net.Conn
	prefix  []byte
	peer    peerAddr
	release func() // frees the listener's connection slot, once, on Close
	closed  sync.Once
}

func (c *prefixConn) Close() error {
	err := c.Conn.Close()
	c.closed.Do(c.release)
	return err
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *prefixConn) RemoteAddr() net.Addr { return c.peer }

// muxListener hands the gRPC connections of the local socket to a grpc.Server and serves
// the registration connections itself.
type muxListener struct {
	lis   *net.UnixListener
	path  string      // where the socket is served
	ino   os.FileInfo // the socket file this node made, so Close unlinks only its own
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	reg   func(*regConn)
	slots chan struct{} // one per open connection, at most maxLocalConns
}

// listenLocal serves the local socket at path with mode. The socket is bound in a fresh
// private directory (0700) beside path, given its mode there, and renamed onto path: no other
// user can connect before the mode is set, and a symlink put at path is replaced, never
// followed. A socket already at path that answers is another node's: refused; one that does
// not is a stale one of an earlier run and is replaced (TestLocalSocketPathIsNotTakenOver).
func listenLocal(path string, mode os.FileMode, reg func(*regConn)) (*muxListener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("node: local socket %s: another process serves it", path)
		}
	} else if err == nil {
		return nil, fmt.Errorf("node: local socket %s: the path exists and is not a socket (%s)", path, fi.Mode().Type())
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".kvoffload-socket-")
	if err != nil {
		return nil, fmt.Errorf("node: local socket: %w", err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("node: local socket: %w", err)
	}
	lis.SetUnlinkOnClose(false) // Close unlinks path itself, if it is still this socket
	fail := func(err error) (*muxListener, error) {
		_ = lis.Close()
		return nil, fmt.Errorf("node: local socket %s: %w", path, err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(err)
	}
	ino, err := os.Lstat(tmp)
	if err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	m := &muxListener{lis: lis, path: path, ino: ino, conns: make(chan net.Conn), done: make(chan struct{}), reg: reg,
		slots: make(chan struct{}, maxLocalConns)}
	go m.acceptLoop()
	return m, nil
}

// acceptLoop accepts until Close. A failed accept that is not the listener closing (EMFILE,
// ECONNABORTED, ...) is retried after a backoff, as net/http and grpc do: giving up on it
// would take the local path down until a restart.
func (m *muxListener) acceptLoop() {
	delay := backoff.ExponentialBackOff{InitialInterval: 5 * time.Millisecond, Multiplier: 2, MaxInterval: time.Second}
	for {
		c, err := m.lis.AcceptUnix()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				m.Close()
				return
			}
			time.Sleep(delay.NextBackOff())
			continue
		}
		delay.Reset()
		select {
		case m.slots <- struct{}{}:
			go m.classify(c)
		default:
			_ = c.Close() // over maxLocalConns
		}
	}
}

// release frees the connection slot classify's connection held.
func (m *muxListener) release() { <-m.slots }

// classify reads a connection's first bytes and routes it.
func (m *muxListener) classify(c *net.UnixConn) {
	peer, err := peerCred(c)
	if err != nil {
		_ = c.Close()
		m.release()
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(firstBytesTimeout))
	head, fds, err := readMsg(c, 4)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		closeFDs(fds)
		_ = c.Close()
		m.release()
		return
	}
	switch string(head) {
	case magicHTTP2:
		closeFDs(fds)
		select {
		case m.conns <- &prefixConn{Conn: c, prefix: head, peer: peer, release: m.release}:
		case <-m.done:
			_ = c.Close()
			m.release()
		}
	case magicRegister, magicUnregister:
		m.reg(&regConn{c: c, uid: peer.uid, pid: peer.pid, first: string(head), fds: fds, regions: map[[16]byte]*region{}})
		m.release() // reg serves the connection until it closes
	default:
		closeFDs(fds)
		_ = c.Close()
		m.release()
	}
}

func (m *muxListener) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case <-m.done:
		return nil, net.ErrClosed
	}
}

func (m *muxListener) Close() error {
	m.once.Do(func() {
		close(m.done)
		_ = m.lis.Close()
		if fi, err := os.Lstat(m.path); err == nil && os.SameFile(fi, m.ino) {
			_ = os.Remove(m.path) // still this node's socket: not a newer node's, nor a file swapped in
		}
	})
	return nil
}

func (m *muxListener) Addr() net.Addr { return m.lis.Addr() }

func peerCred(c *net.UnixConn) (peerAddr, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return peerAddr{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return peerAddr{}, err
	}
	if cerr != nil {
		return peerAddr{}, cerr
	}
	return peerAddr{uid: int32(cred.Uid), pid: cred.Pid}, nil
}

// readMsg reads exactly n bytes and returns the descriptors that came with them.
func readMsg(c *net.UnixConn, n int) ([]byte, []int, error) {
	buf := make([]byte, n)
	oob := make([]byte, unix.CmsgSpace(4*4))
	var fds []int
	for got := 0; got < n; {
		k, oobn, _, _, err := c.ReadMsgUnix(buf[got:], oob)
		if oobn > 0 {
			if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
				for _, msg := range msgs {
					if f, rerr := unix.ParseUnixRights(&msg); rerr == nil {
						fds = append(fds, f...)
					}
				}
			}
		}
		got += k
		if err != nil {
			if errors.Is(err, io.EOF) && got > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, fds, err
		}
		if k == 0 {
			return nil, fds, io.ErrUnexpectedEOF
		}
	}
	return buf, fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// regConn is one registration connection.
type regConn struct {
	c        *net.UnixConn
	uid, pid int32
	first    string // the first message's magic, already read
	fds      []int  // descriptors that came with it
	regions  map[[16]byte]*region
}

// serveRegistrations answers rc's messages until it closes, then unregisters its regions.
func (n *Node) serveRegistrations(rc *regConn) {
	t := n.regions
	if !t.addConn(rc) {
		closeFDs(rc.fds)
		_ = rc.c.Close()
		return
	}
	defer t.removeConn(rc)
	defer func() {
		t.mu.Lock()
		all := make([]*region, 0, len(rc.regions))
		for _, r := range rc.regions {
			all = append(all, r)
		}
		t.mu.Unlock()
		for _, r := range all {
			t.drop(r)
			n.log.Debug("local region unregistered", "region", r.name(), "uid", rc.uid, "pid", rc.pid, "reason", "connection closed")
		}
		_ = rc.c.Close()
	}()
	magic, fds := rc.first, rc.fds
	for {
		var err error
		switch magic {
		case magicRegister:
			err = n.register(rc, fds)
		case magicUnregister:
			closeFDs(fds)
			err = n.unregister(rc)
		default:
			closeFDs(fds)
			return
		}
		if err != nil {
			return
		}
		var head []byte
		head, fds, err = readMsg(rc.c, 4)
		if err != nil {
			closeFDs(fds)
			return
		}
		magic = string(head)
	}
}

func (n *Node) register(rc *regConn, fds []int) error {
	_ = rc.c.SetReadDeadline(time.Now().Add(firstBytesTimeout)) // the rest of the message, promptly
	body, more, err := readMsg(rc.c, 8)
	_ = rc.c.SetReadDeadline(time.Time{})
	fds = append(fds, more...)
	if err != nil {
		closeFDs(fds)
		return err
	}
	if len(fds) != 1 {
		closeFDs(fds)
		return replyErr(rc.c, fmt.Sprintf("a registration carries exactly one memfd, got %d", len(fds)))
	}
	size := binary.LittleEndian.Uint64(body)
	if size > 1<<62 {
		closeFDs(fds)
		return replyErr(rc.c, fmt.Sprintf("region of %d bytes is over the node's MaxRegionBytes %d", size, n.regions.lim.MaxRegionBytes))
	}
	r, err := n.regions.register(rc, fds[0], int64(size))
	if err != nil {
		n.log.Warn("local region refused", "uid", rc.uid, "pid", rc.pid, "size", size, "err", err)
		return replyErr(rc.c, "node: "+err.Error())
	}
	n.log.Debug("local region registered", "region", r.name(), "uid", rc.uid, "pid", rc.pid, "size", size)
	out := append([]byte{0}, r.id[:]...)
	_, err = rc.c.Write(append(out, r.token[:]...))
	return err
}

func (n *Node) unregister(rc *regConn) error {
	_ = rc.c.SetReadDeadline(time.Now().Add(firstBytesTimeout))
	body, fds, err := readMsg(rc.c, 16)
	_ = rc.c.SetReadDeadline(time.Time{})
	closeFDs(fds)
	if err != nil {
		return err
	}
	var id [16]byte
	copy(id[:], body)
	n.regions.mu.Lock()
	r := rc.regions[id]
	n.regions.mu.Unlock()
	if r == nil {
		return replyErr(rc.c, fmt.Sprintf("node: region %x is not registered on this connection", id))
	}
	n.regions.release(r)
	n.log.Debug("local region unregistered", "region", r.name(), "uid", rc.uid, "pid", rc.pid, "reason", "asked")
	_, err = rc.c.Write([]byte{0})
	return err
}

func replyErr(c *net.UnixConn, msg string) error {
	if len(msg) > maxErrMsg {
		msg = msg[:maxErrMsg]
	}
	out := []byte{1, byte(len(msg)), byte(len(msg) >> 8)}
	_, err := c.Write(append(out, msg...))
	return err
}
