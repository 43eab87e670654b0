package client

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvoffload/kvoffload"
	kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// The registration messages of a node's local socket, whose bytes node/local_listen.go
// specifies beside the server.
const (
	magicRegister   = "KVR1"
	magicUnregister = "KVU1"
)

// localPath is the socket path of a "unix://PATH" or "unix:PATH" address, or "".
func localPath(addr string) string {
	if p, ok := strings.CutPrefix(addr, "unix://"); ok {
		return p
	}
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		return p
	}
	return ""
}

// Region is a shared-memory region registered with the node on the client's local socket
// (the zero-copy path, docs/design.md "The local path"): fill Bytes in place and offload
// ranges of it with OffloadFrom, or read values into it with GetInto. It stays registered
// until Close or the Client's Close; when the node drops the registration (it restarted),
// the next call naming the region registers the same memory again, under a new ID, and
// goes on. Safe for concurrent use; the caller decides which ranges each call uses.
type Region struct {
	reg  *registrar
	mem  []byte
	once sync.Once

	refMu     sync.Mutex // guards id, token, gen and fd
	id, token [16]byte
	gen       uint64 // the registration connection's generation (registrar.gen)
	fd        int    // the memfd, kept to register it again; -1 once closed
}

// ref is the region's current ID and token, as calls name it.
func (r *Region) ref() *kvoffloadv1.RegionRef {
	r.refMu.Lock()
	defer r.refMu.Unlock()
	return &kvoffloadv1.RegionRef{Id: bytes.Clone(r.id[:]), Token: bytes.Clone(r.token[:])}
}

// renew registers the region's memfd with the node again after the node refused stale, the
// ID a call named (it no longer knows it: a restart broke the registration connection).
// Callers that saw the same refusal renew once between them: a later one finds the ID
// changed and returns at once.
func (r *Region) renew(stale []byte) error {
	r.refMu.Lock()
	defer r.refMu.Unlock()
	if !bytes.Equal(r.id[:], stale) {
		return nil
	}
	if r.fd < 0 {
		return fmt.Errorf("%w: the region is closed", kvoffload.ErrInvalidArgument)
	}
	id, token, gen, err := r.reg.registerFD(r.fd, len(r.mem))
	if err != nil {
		return err
	}
	r.id, r.token, r.gen = id, token, gen
	return nil
}

// closeFD closes the kept memfd.
func (r *Region) closeFD() {
	r.refMu.Lock()
	defer r.refMu.Unlock()
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
}

// Bytes is the region's memory (len = the size it was created with). Writing a range while
// an OffloadFrom of it runs stores either the old or the new bytes, never a mix that differs
// from the stored checksum; reading a range while a GetInto into it runs sees partial bytes.
func (r *Region) Bytes() []byte { return r.mem }

// Close unregisters the region (the node refuses new calls on it at once and unmaps it once
// the calls reading it end) and unmaps it here. The
// memory must not be used afterwards.
func (r *Region) Close() error {
	var err error
	r.once.Do(func() {
		r.closeFD() // first: a call that meets the unregistered ID must not register it again
		err = r.reg.unregister(r)
		_ = unix.Munmap(r.mem)
	})
	return err
}

// registrar holds a member's registration connection (one per member with a unix:// address,
// dialed on first use and again after it broke).
type registrar struct {
	path   string
	mu     sync.Mutex
	conn   *net.UnixConn
	gen    uint64 // bumped each time conn is dropped: the registrations of older ones are gone
	closed bool   // the client closed: never dial again

	liveMu sync.Mutex
	live   []*Region // registered and not closed: what holding searches
}

// register creates a sealed memfd of size bytes, maps it, and registers it with the node.
// Errors name the node's refusal (limits, e.g. MaxRegionBytes, wrap kvoffload.ErrTooLarge).
func (g *registrar) register(size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: region size %d must be positive", kvoffload.ErrInvalidArgument, size)
	}
	fd, err := unix.MemfdCreate("kvoffload-region", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("client: memfd_create: %w", err)
	}
	kept := false
	defer func() {
		if !kept {
			_ = unix.Close(fd)
		}
	}()
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return nil, fmt.Errorf("client: sizing the region to %d bytes: %w", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return nil, fmt.Errorf("client: sealing the region: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("client: mmap of %d bytes: %w", size, err)
	}
	id, token, gen, err := g.registerFD(fd, size)
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, err
	}
	kept = true // kept open to register the same memory again after a node restart (renew)
	r := &Region{reg: g, mem: mem, fd: fd, gen: gen, id: id, token: token}
	g.liveMu.Lock()
	g.live = append(g.live, r)
	g.liveMu.Unlock()
	return r, nil
}

// registerFD registers size bytes of the memfd fd and returns the node's region ID and token
// and the generation of the connection that holds the registration. A connection broken by a
// node restart fails the first exchange (and is dropped); the registration is then sent once
// more, on a connection dialed afresh.
func (g *registrar) registerFD(fd, size int) (id, token [16]byte, gen uint64, err error) {
	msg := binary.LittleEndian.AppendUint64([]byte(magicRegister), uint64(size))
	reply, gen, err := g.callGen(msg, unix.UnixRights(fd), 32)
	if errors.Is(err, kvoffload.ErrUnavailable) {
		reply, gen, err = g.callGen(msg, unix.UnixRights(fd), 32)
	}
	if err != nil {
		return id, token, gen, err
	}
	copy(id[:], reply[:16])
	copy(token[:], reply[16:])
	return id, token, gen, nil
}

func (g *registrar) unregister(r *Region) error {
	g.liveMu.Lock()
	g.live = slices.DeleteFunc(g.live, func(x *Region) bool { return x == r })
	g.liveMu.Unlock()
	// r's ID and generation first, and not under g.mu: renew holds r.refMu while it calls
	// (which takes g.mu), and Close has waited for any renew (closeFD) before this.
	r.refMu.Lock()
	id, gen := r.id, r.gen
	r.refMu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.conn == nil || gen != g.gen {
		return nil // its connection is gone, and with it the registration
	}
	_, err := g.exchangeLocked(append([]byte(magicUnregister), id[:]...), nil, 0)
	return err
}

// holding returns the registered region whose memory holds each of the n non-empty byte
// slices at(i), and each one's offset in it; nil when there is none (a slice outside every
// region, an empty one, or slices in different regions). A value the caller placed in a
// Region then travels as a descriptor, with no copy.
func (g *registrar) holding(n int, at func(int) []byte) (*Region, []int) {
	if n == 0 {
		return nil, nil
	}
	g.liveMu.Lock()
	defer g.liveMu.Unlock()
	var r *Region
	for _, x := range g.live {
		if _, ok := offsetIn(x.mem, at(0)); ok {
			r = x
			break
		}
	}
	if r == nil {
		return nil, nil
	}
	offs := make([]int, n)
	for i := range n {
		off, ok := offsetIn(r.mem, at(i))
		if !ok {
			return nil, nil
		}
		offs[i] = off
	}
	return r, offs
}

// offsetIn is the offset of v in mem when v is a non-empty subslice of it.
func offsetIn(mem, v []byte) (int, bool) {
	if len(v) == 0 || len(mem) == 0 {
		return 0, false
	}
	base, p := uintptr(unsafe.Pointer(unsafe.SliceData(mem))), uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	if p < base || p-base > uintptr(len(mem)) || uintptr(len(v)) > uintptr(len(mem))-(p-base) {
		return 0, false
	}
	return int(p - base), true
}

// errRefused is a refusal the node answered (the connection is fine).
type errRefused struct{ msg string }

func (e errRefused) Error() string { return e.msg }

// exchangeTimeout bounds one message's exchange on the registration connection: the node
// answers each at once (an unregister does not wait for the calls using the region).
const exchangeTimeout = 10 * time.Second

// callGen sends one message and reads its answer (want bytes after a 0 status byte), dialing
// the connection if there is none, and returns the generation of the connection that
// answered. A broken connection is dropped (its regions are gone on the node), so the next
// call dials afresh.
func (g *registrar) callGen(msg, oob []byte, want int) ([]byte, uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, g.gen, fmt.Errorf("%w: the client's local registrations", kvoffload.ErrClosed)
	}
	if g.conn == nil {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: g.path, Net: "unix"})
		if err != nil {
			return nil, g.gen, fmt.Errorf("%w: client: local socket %s: %w", kvoffload.ErrUnavailable, g.path, err)
		}
		g.conn = c
	}
	out, err := g.exchangeLocked(msg, oob, want)
	return out, g.gen, err
}

// exchangeLocked is one exchange on the open connection, within exchangeTimeout; g.mu is
// held. A broken connection is dropped (ErrUnavailable); the node's refusal names its limit
// (ErrTooLarge) or the message's fault (ErrInvalidArgument).
func (g *registrar) exchangeLocked(msg, oob []byte, want int) ([]byte, error) {
	_ = g.conn.SetDeadline(time.Now().Add(exchangeTimeout))
	out, err := g.exchange(msg, oob, want)
	var refused errRefused
	if err != nil && !errors.As(err, &refused) {
		g.dropLocked()
		return nil, fmt.Errorf("%w: client: registration on %s: %w", kvoffload.ErrUnavailable, g.path, err)
	}
	_ = g.conn.SetDeadline(time.Time{})
	if err != nil {
		if strings.Contains(refused.msg, "Max") {
			return nil, fmt.Errorf("%w: %s", kvoffload.ErrTooLarge, refused.msg)
		}
		return nil, fmt.Errorf("%w: %s", kvoffload.ErrInvalidArgument, refused.msg)
	}
	return out, nil
}

// dropLocked closes the connection; the node forgets every region registered on it.
func (g *registrar) dropLocked() {
	if g.conn != nil {
		_ = g.conn.Close()
		g.conn = nil
		g.gen++
	}
}

func (g *registrar) exchange(msg, oob []byte, want int) ([]byte, error) {
	if _, _, err := g.conn.WriteMsgUnix(msg, oob, nil); err != nil {
		return nil, err
	}
	var st [1]byte
	if _, err := io.ReadFull(g.conn, st[:]); err != nil {
		return nil, err
	}
	if st[0] == 0 {
		out := make([]byte, want)
		_, err := io.ReadFull(g.conn, out)
		return out, err
	}
	var n [2]byte
	if _, err := io.ReadFull(g.conn, n[:]); err != nil {
		return nil, err
	}
	text := make([]byte, binary.LittleEndian.Uint16(n[:]))
	if _, err := io.ReadFull(g.conn, text); err != nil {
		return nil, err
	}
	return nil, errRefused{msg: string(text)}
}

func (g *registrar) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropLocked()
	g.closed = true
}

// staging is a member's pool of regions that the kvoffload.Store calls copy through.
type staging struct {
	reg    *registrar
	mu     sync.Mutex
	free   []*Region
	closed bool // the client closed: regions coming back are closed, not pooled
}

// stagingQuantum rounds staging regions up, so that batches of similar sizes share them.
const stagingQuantum = 16 << 20

// get returns a free region of at least size bytes, registering one if none is free.
func (s *staging) get(size int) (*Region, error) {
	s.mu.Lock()
	best := -1
	for i, r := range s.free {
		if len(r.mem) >= size && (best < 0 || len(r.mem) < len(s.free[best].mem)) {
			best = i
		}
	}
	if best >= 0 {
		r := s.free[best]
		s.free = append(s.free[:best], s.free[best+1:]...)
		s.mu.Unlock()
		return r, nil
	}
	s.mu.Unlock()
	return s.reg.register((max(size, 1) + stagingQuantum - 1) / stagingQuantum * stagingQuantum)
}

// put returns r to the pool; a region the node no longer knows is closed instead.
func (s *staging) put(r *Region, lost bool) {
	s.mu.Lock()
	if lost || s.closed {
		s.mu.Unlock()
		_ = r.Close()
		return
	}
	defer s.mu.Unlock()
	s.free = append(s.free, r)
}

func (s *staging) close() {
	s.mu.Lock()
	free := s.free
	s.free, s.closed = nil, true
	s.mu.Unlock()
	for _, r := range free {
		_ = unix.Munmap(r.mem)
		r.closeFD()
	}
	s.reg.close()
}
