package node

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
)

// A second node refuses a local socket path that a live node serves, instead of taking it
// over (and unlinking it when it closes); a stale socket is replaced; a symlink at the path
// is refused, never followed, so the node cannot be made to chmod or unlink its target.
func TestLocalSocketPathIsNotTakenOver(t *testing.T) {
	n, c := openLocal(t, Local{})
	cfg := testConfig(t.TempDir())
	cfg.Local = Local{Socket: n.LocalSocket()}
	if n2, err := Open(context.Background(), cfg); err == nil {
		n2.Close()
		t.Fatal("a second node opened on a live node's local socket")
	} else if !strings.Contains(err.Error(), "another process serves it") {
		t.Fatalf("second node: %v", err)
	}
	if _, err := c.Stats(context.Background()); err != nil {
		t.Fatalf("the first node's socket after the refused second node: %v", err)
	}

	dir := t.TempDir()
	target := dir + "/target"
	if err := os.WriteFile(target, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := dir + "/sock"
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	cfg = testConfig(t.TempDir())
	cfg.Local = Local{Socket: link, SocketMode: 0o660}
	if n3, err := Open(context.Background(), cfg); err == nil {
		n3.Close()
		t.Fatal("a node opened its local socket over a symlink")
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("the symlink's target changed: %v %v", fi.Mode(), err)
	}
}

// Connections over maxLocalConns are closed at once, and the socket keeps serving once they
// go: a client opening connections without end cannot take the node's descriptors.
func TestLocalConnectionCap(t *testing.T) {
	old := maxLocalConns
	maxLocalConns = 8
	defer func() { maxLocalConns = old }()
	n, _ := openLocal(t, Local{})
	var held []net.Conn
	for range 8 {
		c, err := net.Dial("unix", n.LocalSocket())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond)
	over, err := net.Dial("unix", n.LocalSocket())
	if err != nil {
		t.Fatal(err)
	}
	_ = over.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Fatalf("a connection over the cap was not closed: %v", err)
	}
	for _, c := range held {
		_ = c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	c := dialLocal(t, n) // the slots were released
	if _, err := c.BatchOffload(context.Background(), kvoffload.NewTxnID(), []kvoffload.Object{{Key: "k", Value: []byte("v")}}); err != nil {
		t.Fatalf("after the held connections closed: %v", err)
	}
}
