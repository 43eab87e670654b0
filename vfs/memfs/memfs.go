// Package memfs is an in-memory, crashable vfs.FS for tests: FS keeps, per file, the durable
// content and the unsynced operations, and Crash builds what a power loss could leave.
//
// Crash has four modes. CrashDropAll, CrashPrefix and CrashTorn treat each file alone and
// make a directory's entry changes durable all at once at its SyncDir (the POSIX contract
// vfs.FS states). CrashExt4Ordered models ext4 mounted with its defaults (data=ordered,
// delayed allocation, 4 KiB blocks):
//   - Metadata is journaled (docs.kernel.org/filesystems/ext4/journal.html): creations,
//     unlinks, renames, truncates and hole punches join JBD2's one running transaction in
//     the order they are made, and a crash keeps a prefix of those made since the last
//     commit (a periodic commit may fall between any two). A Sync of a file whose inode
//     changed in the running transaction (created, truncated, punched or grown), or a
//     SyncDir of a directory whose entries did, commits it: every metadata operation
//     before it, of any file, survives. A Sync of a file with only overwrites commits
//     nothing (fdatasync needs no metadata then).
//   - Data is not journaled ("file data blocks are not guaranteed to be in any consistent
//     state after a crash", ibid.): unsynced overwrites survive per 4 KiB page
//     independently, a page possibly torn at 512-byte sectors.
//   - data=ordered: "all data are forced directly out to the main file system prior to its
//     metadata being committed to the journal" (docs.kernel.org/admin-guide/ext4.html), and
//     with delayed allocation an append's blocks and the size that covers them are
//     allocated at writeback, after its data: a file's appends survive as a prefix, whole,
//     and its size never covers appended bytes that did not reach the disk. A truncate that
//     grows a file is metadata and reads zeros.
//   - A rename over an existing file guarantees nothing about the renamed file's unsynced
//     data: auto_da_alloc starts its writeback before the rename, which "is still not a
//     guarantee" (Ts'o, "ext4: allocate delayed allocation blocks before rename", 2009), so
//     the new name may show a file whose appends are lost (the zero-length file).
//
// Directories are durable as soon as MkdirAll returns in every mode.
package memfs

import (
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/kvoffload/kvoffload/vfs"
)

// FS is an in-memory, crashable filesystem (a test double of vfs.OSFS). Per file it keeps the
// durable content and the pending (unsynced) writes, truncates and punches; per directory it
// keeps the current and the durable entries. A created or removed name becomes durable only
// at SyncDir of its directory. Directories themselves are durable as soon as MkdirAll
// returns (a simplification: the store never creates directories after Open).
// Crash builds the filesystem a power loss could leave. All methods are safe for concurrent
// use; one mutex serialises them.
type FS struct {
	mu    sync.Mutex
	dirs  map[string]*memDir
	locks map[string]bool
	jnl   journal // CrashExt4Ordered's view of the metadata operations (ext4.go)
}

type memDir struct {
	names     map[string]*memInode // current entries
	durable   map[string]*memInode // entries as of the last SyncDir
	committed map[string]*memInode // entries as of the last journal commit (CrashExt4Ordered)
	jseq      uint64               // the operation number of the last change of its entries
}

type memInode struct {
	durable memData
	cur     memData
	pending []memOp
	jseq    uint64 // the operation number of its last journaled change (create, truncate, punch, growth)
}

// Compile-time checks that FS satisfies the seam.
var (
	_ vfs.FS   = (*FS)(nil)
	_ vfs.File = (*memFile)(nil)
)

// CrashMode selects which pending operations survive a Crash.
type CrashMode int

const (
	// CrashDropAll keeps only durable state.
	CrashDropAll CrashMode = iota
	// CrashPrefix keeps, per file, a random prefix of the pending operations.
	CrashPrefix
	// CrashTorn keeps a random subset and tears the last surviving write at a 512-byte
	// boundary.
	CrashTorn
	// CrashExt4Ordered leaves what ext4 with data=ordered (and delayed allocation, its
	// defaults) could: a prefix of the metadata operations since the last journal commit,
	// unsynced overwrites lost, kept or torn per 4 KiB page, and a file grown only over data
	// that reached the disk. The package doc gives the rules and their sources.
	CrashExt4Ordered
)

// String returns the mode's name as the simulator's stats print it: "drop-all", "prefix",
// "torn" or "ext4-ordered".
func (c CrashMode) String() string {
	if names := [...]string{"drop-all", "prefix", "torn", "ext4-ordered"}; c >= 0 && int(c) < len(names) {
		return names[c]
	}
	return fmt.Sprintf("CrashMode(%d)", int(c))
}

// New returns an empty FS whose root "/" and "." exist.
func New() *FS {
	m := &FS{dirs: map[string]*memDir{}, locks: map[string]bool{}}
	m.mkdir("/")
	m.mkdir(".")
	return m
}

func (m *FS) mkdir(dir string) {
	if m.dirs[dir] == nil {
		m.dirs[dir] = &memDir{names: map[string]*memInode{}, durable: map[string]*memInode{}, committed: map[string]*memInode{}}
	}
}

// OpenFile implements vfs.FS. Supported flags: O_RDONLY, O_WRONLY, O_RDWR, O_CREATE, O_EXCL,
// O_TRUNC; others are ignored.
func (m *FS) OpenFile(name string, flag int, _ os.FileMode) (vfs.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base := splitPath(name)
	d := m.dirs[dir]
	if d == nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	ino := d.names[base]
	switch {
	case ino == nil && flag&os.O_CREATE == 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case ino != nil && flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case ino == nil:
		ino = &memInode{durable: newMemData(), cur: newMemData()}
		d.names[base] = ino
		ino.jseq = m.logEntry(nsOp{kind: nsCreate, dir: dir, name: base, ino: ino})
	}
	f := &memFile{fs: m, name: filepath.Clean(name), ino: ino, writable: flag&(os.O_WRONLY|os.O_RDWR) != 0}
	if flag&os.O_TRUNC != 0 && f.writable {
		_ = f.record(memOp{kind: memTruncate, off: 0})
	}
	return f, nil
}

func splitPath(name string) (dir, base string) {
	name = filepath.Clean(name)
	return filepath.Dir(name), filepath.Base(name)
}

// Remove implements vfs.FS.
func (m *FS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base := splitPath(name)
	d := m.dirs[dir]
	if d == nil || d.names[base] == nil {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(d.names, base)
	m.logEntry(nsOp{kind: nsUnlink, dir: dir, name: base})
	return nil
}

// Rename implements vfs.FS: the inode moves to newname, replacing any file there. Like a
// creation and a removal, the move is durable only at SyncDir of each directory involved.
func (m *FS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	odir, obase := splitPath(oldname)
	ndir, nbase := splitPath(newname)
	od, nd := m.dirs[odir], m.dirs[ndir]
	if od == nil || od.names[obase] == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	if nd == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	ino := od.names[obase]
	delete(od.names, obase)
	nd.names[nbase] = ino
	m.logEntry(nsOp{kind: nsRename, dir: odir, name: obase, ndir: ndir, nname: nbase, ino: ino})
	return nil
}

// MkdirAll implements vfs.FS.
func (m *FS) MkdirAll(path string, _ os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		m.mkdir(p)
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// ReadDir implements vfs.FS: files and subdirectories, sorted.
func (m *FS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir = filepath.Clean(dir)
	d := m.dirs[dir]
	if d == nil {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: fs.ErrNotExist}
	}
	var names []string
	for n := range d.names {
		names = append(names, n)
	}
	for p := range m.dirs {
		if p != dir && filepath.Dir(p) == dir {
			names = append(names, filepath.Base(p))
		}
	}
	slices.Sort(names)
	return names, nil
}

// SyncDir implements vfs.FS.
func (m *FS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.dirs[filepath.Clean(dir)]
	if d == nil {
		return &fs.PathError{Op: "syncdir", Path: dir, Err: fs.ErrNotExist}
	}
	d.durable = maps.Clone(d.names)
	if d.jseq > m.jnl.committed {
		m.commit() // fsync of a directory changed in the running transaction commits it
	}
	return nil
}

// Lock implements vfs.FS. Locks live only in this FS value (not in its files); a held lock
// gives an error wrapping vfs.ErrLocked.
func (m *FS) Lock(name string) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = filepath.Clean(name)
	if m.locks[name] {
		return nil, fmt.Errorf("%w: %s", vfs.ErrLocked, name)
	}
	m.locks[name] = true
	return &memLock{fs: m, name: name}, nil
}

type memLock struct {
	fs   *FS
	name string
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.fs.mu.Lock()
		delete(l.fs.locks, l.name)
		l.fs.mu.Unlock()
	})
	return nil
}

// LosePending drops the unsynced writes of the file name, as Linux does to a file's dirty
// pages when their writeback fails (a failed fsync reports it). Truncates and hole punches,
// which are metadata, stay (still unsynced). It models the EIO of a failed fsync for tests;
// errorfs injects the error itself.
func (m *FS) LosePending(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base := splitPath(name)
	d := m.dirs[dir]
	if d == nil || d.names[base] == nil {
		return &fs.PathError{Op: "losepending", Path: name, Err: fs.ErrNotExist}
	}
	ino := d.names[base]
	kept := ino.pending[:0]
	ino.cur = ino.durable.clone()
	for _, op := range ino.pending {
		if op.kind != memWrite {
			ino.cur.apply(op)
			kept = append(kept, op)
		}
	}
	ino.pending = kept
	return nil
}

// Crash returns a new FS holding what a power loss at this instant could leave: the
// durable entries of every directory, each file with its durable content plus the pending
// operations mode lets survive. The receiver is unchanged; locks are not carried over.
// For a given rng state the result is deterministic.
func (m *FS) Crash(mode CrashMode, rng *rand.Rand) *FS {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mode == CrashExt4Ordered {
		return m.crashExt4(rng)
	}
	c := &FS{dirs: map[string]*memDir{}, locks: map[string]bool{}}
	for _, p := range sortedKeys(m.dirs) {
		c.mkdir(p)
		nd, od := c.dirs[p], m.dirs[p]
		for _, n := range sortedKeys(od.durable) {
			ino := od.durable[n]
			data := crashed(ino.durable, ino.pending, mode, rng)
			ni := &memInode{durable: data, cur: data.clone()}
			nd.names[n], nd.durable[n], nd.committed[n] = ni, ni, ni
		}
	}
	return c
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
