package raftmeta

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/third_party/raft"
)

// listenWith returns a stream layer on a free loopback port whose cluster ID is *id, and
// echoes every accepted connection's first bytes back (or its handshake error) on errs.
func listenWith(t *testing.T, id *string, open bool) (*streamLayer, chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &streamLayer{Listener: ln, advertise: ln.Addr(), policy: &ClusterPolicy{ID: func() string { return *id }, Open: func() bool { return open }}}
	t.Cleanup(func() { ln.Close() })
	errs := make(chan error, 4)
	go func() {
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4)
				_, err := io.ReadFull(c, buf)
				if err == nil && string(buf) != "ping" {
					err = errors.New("got " + string(buf))
				}
				errs <- err
			}()
		}
	}()
	return s, errs
}

// TestClusterHandshake: same ID connects and carries raft's bytes; another ID (or none) is
// refused on both sides with both IDs named; an acceptor without an ID accepts any hello
// only when its policy says so (data from before cluster IDs), else none (a fresh node).
func TestClusterHandshake(t *testing.T) {
	a, b, fresh := "cluster-a", "cluster-b", ""
	la, errsA := listenWith(t, &a, false)
	lf, errsFresh := listenWith(t, &fresh, true)
	lclosed, errsClosed := listenWith(t, &fresh, false)
	dial := func(from string, to *streamLayer) (net.Conn, error) {
		return (&streamLayer{policy: &ClusterPolicy{ID: func() string { return from }}}).Dial(raft.ServerAddress(to.Addr().String()), time.Second)
	}
	ping := func(c net.Conn, errs chan error, what string) {
		t.Helper()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatalf("%s: write: %v", what, err)
		}
		if err := <-errs; err != nil {
			t.Fatalf("%s: acceptor: %v", what, err)
		}
		c.Close()
	}

	c, err := dial(a, la)
	if err != nil {
		t.Fatalf("same cluster: %v", err)
	}
	ping(c, errsA, "same cluster")
	for _, from := range []string{b, ""} {
		_, err := dial(from, la)
		if !errors.Is(err, ErrClusterMismatch) || !strings.Contains(err.Error(), `"`+a+`"`) || !strings.Contains(err.Error(), `"`+from+`"`) {
			t.Fatalf("dial from cluster %q: %v, want ErrClusterMismatch naming both IDs", from, err)
		}
		if err := <-errsA; !errors.Is(err, ErrClusterMismatch) {
			t.Fatalf("acceptor, dialer of cluster %q: %v, want ErrClusterMismatch", from, err)
		}
	}
	c, err = dial(b, lf)
	if err != nil {
		t.Fatalf("to a node without a cluster ID that accepts any (data from before IDs): %v", err)
	}
	ping(c, errsFresh, "to an open node")
	if _, err := dial(b, lclosed); !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("to a fresh node not joining anything: %v, want ErrClusterMismatch", err)
	}
	if err := <-errsClosed; !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("a fresh node not joining anything, acceptor: %v, want ErrClusterMismatch", err)
	}
}
