package node

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"runtime/debug"
	"sync"

	"golang.org/x/sys/unix"
)

// region is a client's memfd mapped MAP_SHARED into the node (the shared-memory path,
// docs/design.md "The local path"). It lives while the registration connection that
// registered it is open; closing waits for the operations using it, then unmaps.
type region struct {
	id, token [16]byte
	mem       []byte
	size      int64
	uid, pid  int32 // SO_PEERCRED of the registration connection
	conn      *regConn

	mu     sync.Mutex
	refs   int
	closed bool
	idle   *sync.Cond
}

func (r *region) name() string { return hex.EncodeToString(r.id[:]) }

// acquire takes a reference for one operation; false once the region is closing.
func (r *region) acquire() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.refs++
	return true
}

func (r *region) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refs--
	if r.refs == 0 {
		r.idle.Broadcast()
	}
}

// close refuses new operations, waits for those in flight, then unmaps.
func (r *region) close() {
	r.mu.Lock()
	r.closed = true
	for r.refs > 0 {
		r.idle.Wait()
	}
	mem := r.mem
	r.mem = nil
	r.mu.Unlock()
	if mem != nil {
		_ = unix.Munmap(mem)
	}
}

// bounds is why [off, off+n) is not inside the region, or "".
func (r *region) bounds(off, n uint64) string {
	size := uint64(r.size) // not len(r.mem): close clears mem under mu, and bounds holds no lock
	if off > size || n > size-off {
		return fmt.Sprintf("descriptor [%d, +%d) is outside the region of %d bytes", off, n, size)
	}
	return ""
}

// safeCopy copies and turns a fault on the mapping (which a sealed memfd should never give)
// into an error instead of a crash of the node.
func safeCopy(dst, src []byte) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if p := recover(); p != nil {
			err = fmt.Errorf("node: fault while copying region bytes: %v", p)
		}
	}()
	copy(dst, src)
	return nil
}

// regions is the node's table of registered regions, with the per-node limits.
type regions struct {
	lim Local

	mu     sync.Mutex
	byID   map[[16]byte]*region
	conns  map[*regConn]struct{}
	count  int   // regions registered or being mapped (the MaxRegions check)
	mapped int64 // bytes of those
	closed bool
}

func newRegions(lim Local) *regions {
	return &regions{lim: lim.withDefaults(), byID: map[[16]byte]*region{}, conns: map[*regConn]struct{}{}}
}

// register maps size bytes of fd for conn. It takes ownership of fd (closed on return: the
// mapping keeps the memfd alive).
func (t *regions) register(conn *regConn, fd int, size int64) (*region, error) {
	defer unix.Close(fd)
	lim := t.lim
	if size <= 0 {
		return nil, fmt.Errorf("region size %d: must be positive", size)
	}
	if size > lim.MaxRegionBytes {
		return nil, fmt.Errorf("region of %d bytes is over the node's MaxRegionBytes %d", size, lim.MaxRegionBytes)
	}
	if err := checkMemfd(fd, size); err != nil {
		return nil, err
	}
	t.mu.Lock()
	switch {
	case t.closed:
		t.mu.Unlock()
		return nil, fmt.Errorf("the node is closing")
	case len(conn.regions) >= lim.MaxRegionsPerConn:
		t.mu.Unlock()
		return nil, fmt.Errorf("this connection already holds %d regions, the node's MaxRegionsPerConn", lim.MaxRegionsPerConn)
	case t.count >= lim.MaxRegions:
		t.mu.Unlock()
		return nil, fmt.Errorf("the node already holds %d regions, its MaxRegions", lim.MaxRegions)
	case t.mapped+size > lim.MaxMappedBytes:
		t.mu.Unlock()
		return nil, fmt.Errorf("mapping %d more bytes would take the node over its MaxMappedBytes %d (%d mapped)", size, lim.MaxMappedBytes, t.mapped)
	}
	t.mapped += size // reserved before mapping, so concurrent registrations cannot overshoot
	t.count++
	t.mu.Unlock()
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.mu.Lock()
		t.mapped -= size
		t.count--
		t.mu.Unlock()
		return nil, fmt.Errorf("mmap of %d bytes: %w", size, err)
	}
	r := &region{mem: mem, size: size, uid: conn.uid, pid: conn.pid, conn: conn}
	r.idle = sync.NewCond(&r.mu)
	if _, err := rand.Read(r.id[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux (crypto/rand docs)
	}
	_, _ = rand.Read(r.token[:])
	t.mu.Lock()
	t.byID[r.id] = r
	conn.regions[r.id] = r
	t.mu.Unlock()
	return r, nil
}

// checkMemfd accepts only a memfd sealed against shrinking whose size covers size: a file
// that could be truncated under the mapping would make the node's accesses fault (SIGBUS).
// The seals are read before the size: once F_SEAL_SHRINK is set the size can only grow, so
// a size read after it holds for the mapping's life, while one read before could be shrunk
// by the client, which then seals, between the two reads.
func checkMemfd(fd int, size int64) error {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("fstatfs of the region's fd: %w", err)
	}
	if fs.Type != unix.TMPFS_MAGIC {
		return fmt.Errorf("the region's fd is not a memfd on shmem (filesystem type %#x)", fs.Type)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("the region's fd has no seals (create it with MFD_ALLOW_SEALING): %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return fmt.Errorf("the memfd must be sealed with F_SEAL_SHRINK, so that it cannot be truncated under the node")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat of the region's fd: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("the region's fd is not a regular file (a memfd)")
	}
	if st.Size < size {
		return fmt.Errorf("the memfd has %d bytes, fewer than the %d registered", st.Size, size)
	}
	return nil
}

// lookup finds the region ref names for a caller with the given credentials: the token must
// match, and the caller must be the process (uid and pid) that registered it.
func (t *regions) lookup(id, token []byte, uid, pid int32) (*region, error) {
	var key [16]byte
	if len(id) != len(key) || len(token) != len(key) {
		return nil, fmt.Errorf("region ID and token must be %d bytes each, got %d and %d", len(key), len(id), len(token))
	}
	copy(key[:], id)
	t.mu.Lock()
	r := t.byID[key]
	t.mu.Unlock()
	if r == nil || subtle.ConstantTimeCompare(r.token[:], token) != 1 || r.uid != uid || r.pid != pid {
		return nil, fmt.Errorf("region %x is not registered by this client (unknown ID, wrong token, or another process)", id)
	}
	return r, nil
}

// addConn tracks rc until removeConn; false when the node is closing.
func (t *regions) addConn(rc *regConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.conns[rc] = struct{}{}
	return true
}

func (t *regions) removeConn(rc *regConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.conns, rc)
}

// drop removes r from the tables and closes it (waiting for its operations).
func (t *regions) drop(r *region) {
	if !t.forget(r) {
		r.close() // dropped by another caller: wait for it to be unmapped
		return
	}
	t.unmap(r)
}

// release drops r on its owner's request: new operations on it are refused at once, and it is
// unmapped (and stops counting against the limits) once the operations holding it end, in
// the background, so an unregister is answered without waiting for a transaction that reads
// the region in place. The client has unmapped its side by then, so no byte of the region
// changes under those operations.
func (t *regions) release(r *region) {
	if !t.forget(r) {
		return // dropped by another caller
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	go t.unmap(r)
}

// forget takes r out of the table (no call can name it any more); false if another caller
// already did.
func (t *regions) forget(r *region) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[r.id] != r {
		return false
	}
	delete(t.byID, r.id)
	delete(r.conn.regions, r.id)
	return true
}

// unmap waits for the operations holding r, unmaps it and stops counting it.
func (t *regions) unmap(r *region) {
	r.close()
	t.mu.Lock()
	t.mapped -= r.size
	t.count--
	t.mu.Unlock()
}

// closeAll closes every region (the node is closing).
func (t *regions) closeAll() {
	t.mu.Lock()
	t.closed = true
	for rc := range t.conns {
		_ = rc.c.Close() // its serveRegistrations returns
	}
	all := make([]*region, 0, len(t.byID))
	for _, r := range t.byID {
		all = append(all, r)
	}
	t.mu.Unlock()
	for _, r := range all {
		t.drop(r)
	}
}
