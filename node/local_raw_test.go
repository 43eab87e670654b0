package node

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/local"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// rawRegister registers fd (size bytes) on a new registration connection, as the protocol
// in local_listen.go says; it returns the connection (the region lives while it is open)
// and the answer: the region reference, or the node's error message.
func rawRegister(t *testing.T, path string, fd int, size uint64) (*net.UnixConn, *pb.RegionRef, string) {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	msg := binary.LittleEndian.AppendUint64([]byte(magicRegister), size)
	if _, _, err := c.WriteMsgUnix(msg, unix.UnixRights(fd), nil); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var st [1]byte
	if _, err := io.ReadFull(c, st[:]); err != nil {
		t.Fatal(err)
	}
	if st[0] != 0 {
		var n [2]byte
		_, _ = io.ReadFull(c, n[:])
		text := make([]byte, binary.LittleEndian.Uint16(n[:]))
		_, _ = io.ReadFull(c, text)
		return c, nil, string(text)
	}
	var ans [32]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		t.Fatal(err)
	}
	return c, &pb.RegionRef{Id: ans[:16], Token: ans[16:]}, ""
}

// memfd makes a memfd of size bytes, sealed against shrinking when sealed.
func memfd(t *testing.T, size int64, sealed bool) int {
	t.Helper()
	fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	if sealed {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

func rawLocalClient(t *testing.T, path string) pb.LocalKVOffloadClient {
	t.Helper()
	cc, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(local.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return pb.NewLocalKVOffloadClient(cc)
}

// TestLocalRegionOwnership: a region is usable only with its token; another client's token,
// a made-up one, or the TCP API cannot name it.
func TestLocalRegionOwnership(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Local.Socket = localSocketPath(t)
	cfg.APIAddr = "127.0.0.1:0"
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	_, a, msg := rawRegister(t, n.LocalSocket(), memfd(t, 1<<20, true), 1<<20)
	_, b, msg2 := rawRegister(t, n.LocalSocket(), memfd(t, 1<<20, true), 1<<20)
	if a == nil || b == nil {
		t.Fatalf("registration refused: %s %s", msg, msg2)
	}
	lc := rawLocalClient(t, n.LocalSocket())
	ctx := context.Background()
	for name, ref := range map[string]*pb.RegionRef{
		"another registration's token": {Id: a.Id, Token: b.Token},
		"no token":                     {Id: a.Id},
		"unknown ID":                   {Id: make([]byte, 16), Token: a.Token},
	} {
		_, err := lc.Offload(ctx, &pb.LocalOffloadRequest{TxnId: newID(), Region: ref, Objects: []*pb.Desc{{Key: "k", Length: 1}}})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v, want PermissionDenied", name, err)
		}
		_, err = lc.Get(ctx, &pb.LocalGetRequest{Region: ref, Keys: []*pb.Desc{{Key: "k", Length: 1}}})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s (Get): %v, want PermissionDenied", name, err)
		}
	}
	cc, err := grpc.NewClient(n.APIAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = pb.NewLocalKVOffloadClient(cc).Offload(ctx, &pb.LocalOffloadRequest{TxnId: newID(), Region: a})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("LocalKVOffload on the TCP API: %v, want Unimplemented", err)
	}
}

func newID() []byte { id := kvoffload.NewTxnID(); return id[:] }

// TestLocalBadInput: descriptors out of bounds (per key, naming the region's size), short
// descriptors, unsealed or undersized memfds, a registration without a memfd and garbage on
// the socket are refused; the node keeps serving.
func TestLocalBadInput(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Local.Socket = localSocketPath(t)
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	path := n.LocalSocket()
	if _, _, msg := rawRegister(t, path, memfd(t, 1<<20, false), 1<<20); !strings.Contains(msg, "F_SEAL_SHRINK") {
		t.Errorf("unsealed memfd: %q", msg)
	}
	if _, _, msg := rawRegister(t, path, memfd(t, 1<<20, true), 2<<20); !strings.Contains(msg, "fewer than the 2097152 registered") {
		t.Errorf("undersized memfd: %q", msg)
	}
	if _, _, msg := rawRegister(t, path, memfd(t, 1<<20, true), 1<<63); !strings.Contains(msg, "MaxRegionBytes") {
		t.Errorf("huge size: %q", msg)
	}
	for _, junk := range []string{"KVR1", "KVR1\x00\x00\x10\x00\x00\x00\x00\x00", "KVU1short", "GET / HTTP/1.1\r\n\r\n", "PRI garbage"} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte(junk))
		_ = c.Close()
	}
	_, ref, msg := rawRegister(t, path, memfd(t, 1<<20, true), 1<<20)
	if ref == nil {
		t.Fatal(msg)
	}
	lc := rawLocalClient(t, path)
	ctx := context.Background()
	res, err := lc.Offload(ctx, &pb.LocalOffloadRequest{TxnId: newID(), Region: ref, Objects: []*pb.Desc{
		{Key: keyOf("ok", 0), Offset: 0, Length: 100},
		{Key: keyOf("out", 0), Offset: 1 << 20, Length: 1},
		{Key: keyOf("wrap", 0), Offset: 1<<64 - 1, Length: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Results[0]; r.Outcome != pb.Outcome_OUTCOME_STORED {
		t.Fatalf("in bounds: %v", r)
	}
	for _, r := range res.Results[1:] {
		if r.Outcome != pb.Outcome_OUTCOME_REJECTED || r.Code != pb.Code_CODE_INVALID_VALUE || !strings.Contains(r.Reason, "outside the region of 1048576 bytes") {
			t.Fatalf("out of bounds: %v", r)
		}
	}
	if _, ok := n.FSM().Lookup(keyOf("out", 0)); ok {
		t.Fatal("an out-of-bounds key was committed")
	}
	got, err := lc.Get(ctx, &pb.LocalGetRequest{Region: ref, Keys: []*pb.Desc{
		{Key: keyOf("ok", 0), Offset: 1000, Length: 50},
		{Key: keyOf("ok", 0), Offset: 1<<20 - 10, Length: 100},
		{Key: keyOf("ok", 0), Offset: 2000, Length: 100},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if g := got.Results[0]; g.Code != pb.Code_CODE_SHORT_BUFFER || g.Size != 100 {
		t.Errorf("short descriptor: %v", g)
	}
	if g := got.Results[1]; g.Code != pb.Code_CODE_INVALID_VALUE || !strings.Contains(g.Reason, "1048576") {
		t.Errorf("out of bounds read: %v", g)
	}
	if g := got.Results[2]; g.Status != pb.GetStatus_GET_STATUS_FOUND || g.Size != 100 {
		t.Errorf("read: %v", g)
	}
}

// TestRegionCloseWaits: closing a region waits for the operation holding it, then unmaps;
// an operation that comes after the close is refused, so an offload whose copy had not
// started stores nothing (Failed, CodeCanceled).
func TestRegionCloseWaits(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Local.Socket = localSocketPath(t)
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	conn, ref, msg := rawRegister(t, n.LocalSocket(), memfd(t, 1<<20, true), 1<<20)
	if ref == nil {
		t.Fatal(msg)
	}
	p, err := peerCred(conn)
	if err != nil {
		t.Fatal(err)
	}
	r, err := n.regions.lookup(ref.Id, ref.Token, p.uid, p.pid)
	if err != nil {
		t.Fatal(err)
	}
	if !r.acquire() {
		t.Fatal("a registered region refused an operation")
	}
	closed := make(chan struct{})
	go func() { n.regions.drop(r); close(closed) }()
	select {
	case <-closed:
		t.Fatal("the region closed while an operation held it")
	case <-time.After(100 * time.Millisecond):
	}
	r.release()
	<-closed
	if r.mem != nil {
		t.Fatal("the region is still mapped after its close")
	}
	if _, err := inPlace(r, []*pb.Desc{{Key: "k", Length: 1}}, []int{0}); err == nil || !strings.Contains(err.Error(), "unregistered before the offload began") {
		t.Fatalf("offload after the close: %v", err)
	}
	if _, err := n.regions.lookup(ref.Id, ref.Token, p.uid, p.pid); err == nil {
		t.Fatal("a closed region can still be named")
	}
}
