package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"

	"github.com/kvoffload/kvoffload/vfs/errorfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// errPowerOff is every operation's error once the power has failed.
var errPowerOff = errors.New("sim: the power is off")

// image is what a power loss leaves: the disk and the Raft log as they survive it, the model
// of what had been acknowledged by then, and where the loss struck.
type image struct {
	fs    *memfs.FS
	log   [][]byte
	model *model
	point string // the persistence point's kind (errorfs.Op name, or "append" to the Raft log)
	mode  string // what the loss kept of unsynced changes (memfs.CrashMode's name)
	sig   string // its signature (signature)
	n     int    // its number in this world
}

// disk is a world's simulated disk and Raft log. It numbers the persistence points and, at
// the crashAt-th, captures the image and turns the power off. mu also guards the Raft log
// and the model, so an image is one instant of all three.
type disk struct {
	mem *memfs.FS

	mu      sync.Mutex
	n       int        // persistence points passed
	crashAt int        // the point the power fails at; 0: never
	off     bool       // the power has failed: every later operation fails
	img     *image     // captured when the power failed
	log     [][]byte   // the Raft log: every appended command, in order
	model   *model     // what the workload was told
	rng     *rand.Rand // the crash's choices (mode, a Raft append kept or not)
	onOff   func()     // called (under mu) when the power fails
	phase   string     // "recovery" while the world opens, then "run"
	focus   string     // a signature to fail the power at (Options.Focus); "": crashAt
	seen    map[string]int
	faults  map[string]int // storage faults injected, by kind
	trace   func(format string, args ...any)
	// reading is set while the workload's client reads run: only their bucket reads fail
	// (EIO) or come back flipped, each noted in readFaults.
	reading    bool
	readKeys   map[string]string // readAt(name, off) -> the key whose record is there
	readFaults map[string]string // readAt(name, off) -> the fault its read met
}

// signature names a persistence point by kind, the file it touches and the phase, e.g.
// "rename wal-start @recovery": the unit of the simulator's coverage.
func signature(kind, name, phase string) string {
	var class string
	switch {
	case name == "raft":
		class = "raft-log"
	case name == walDir || name == bucketDir:
		class = strings.TrimPrefix(name, "/data/") + "-dir"
	case strings.HasPrefix(name, walDir+"/"):
		// A segment, or the copies TruncateFront writes: 00000000000000000001.START.TEMP
		// is "wal-segment-start-temp".
		base := strings.TrimLeft(strings.TrimPrefix(name, walDir+"/"), "0123456789")
		class = "wal-segment" + strings.ToLower(strings.ReplaceAll(base, ".", "-"))
	case strings.HasPrefix(name, bucketDir+"/"):
		class = "bucket"
	default:
		class = "other"
	}
	return kind + " " + class + " @" + phase
}

// crashModes are the ways memfs.Crash may treat unsynced changes (memfs.CrashMode).
var crashModes = [...]memfs.CrashMode{memfs.CrashDropAll, memfs.CrashPrefix, memfs.CrashTorn, memfs.CrashExt4Ordered}

// inject is the errorfs.Injector of the world's filesystem.
func (d *disk) inject(op errorfs.Op, name string) error {
	switch op {
	case errorfs.OpWrite, errorfs.OpSync, errorfs.OpSyncDir, errorfs.OpRename, errorfs.OpRemove,
		errorfs.OpTruncate, errorfs.OpPunch:
		d.mu.Lock()
		defer d.mu.Unlock()
		if err := d.pointLocked(op.String(), name, nil); err != nil {
			return err
		}
		return d.faultLocked(op, name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.off {
		return errPowerOff
	}
	return nil
}

// Storage faults without a power loss, one in this many of their operations: a bucket
// file's fdatasync fails with EIO (and, as on Linux, its unsynced writes are lost), a bucket
// write finds the disk full, a WAL write fails with EIO (the WAL fail-stops the node).
const (
	syncEIOOdds   = 96
	writeFullOdds = 128
	walEIOOdds    = 512
)

// Storage faults of reads and writes, one in this many of their operations: a client's
// bucket read fails with EIO or returns a flipped bit (once: the disk keeps its bytes), a
// bucket write stores only part of its bytes (ENOSPC midway), a WAL write too (EIO).
const (
	readEIOOdds        = 64
	readFlipOdds       = 64
	shortWriteOdds     = 128
	walShortWriteOdds  = 512
	shortWriteReported = 2 // one short write in this many reports its byte count; the rest 0
)

// readAt names a read of a file at an offset (readFaults' key).
func readAt(name string, off int64) string { return fmt.Sprintf("%s@%d", name, off) }

// hooks are the world's read and write faults (errorfs.Hooks).
func (d *disk) hooks() errorfs.Hooks { return errorfs.Hooks{Read: d.readHook, Write: d.writeHook} }

// readHook draws a fault for a read of a bucket by the workload's client reads.
func (d *disk) readHook(name string, p []byte, off int64, n int, err error) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.reading || !strings.HasPrefix(name, bucketDir+"/") || err != nil && n == 0 {
		return n, err
	}
	switch {
	case d.rng.IntN(readEIOOdds) == 0:
		d.readFault("eio-bucket-read", name, off)
		return 0, &fs.PathError{Op: "read", Path: name, Err: syscall.EIO}
	case n > 0 && d.rng.IntN(readFlipOdds) == 0:
		p[d.rng.IntN(n)] ^= 1 << d.rng.IntN(8)
		d.readFault("flip-bucket-read", name, off)
		// The coordinator reads the record again (txn's re-read) and finds the disk's bytes;
		// the model allows, from now on and in the image of a power loss, found, Corrupt or
		// gone, never wrong bytes.
		if k := d.readKeys[readAt(name, off)]; k != "" && d.model.keys[k] != absent {
			d.model.keys[k] = damaged
			d.model.decided[k]++
		}
	}
	return n, err
}

func (d *disk) readFault(kind, name string, off int64) {
	d.faults[kind]++
	d.readFaults[readAt(name, off)] = kind
	d.trace("fault %s on %s at %d", kind, name, off)
}

// writeHook draws a short write of a bucket or WAL file: a sector-aligned part of p is
// stored, and the write reports that part or nothing, with ENOSPC (a bucket) or EIO (the
// WAL, which then fail-stops the node).
func (d *disk) writeHook(name string, p []byte, off int64) (keep, n int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var kind string
	var errno syscall.Errno
	switch {
	case len(p) < 2:
		return 0, 0, nil
	case strings.HasPrefix(name, bucketDir+"/") && d.rng.IntN(shortWriteOdds) == 0:
		kind, errno = "short-bucket-write", syscall.ENOSPC
	case strings.HasPrefix(name, walDir+"/") && d.rng.IntN(walShortWriteOdds) == 0:
		kind, errno = "short-wal-write", syscall.EIO
	default:
		return 0, 0, nil
	}
	keep = d.rng.IntN(len(p)) // a strict prefix, at a sector boundary of a write of several
	if len(p) > 512 {
		keep &^= 511
	}
	if d.rng.IntN(shortWriteReported) == 0 {
		n = keep
	}
	d.faults[kind]++
	d.trace("fault %s on %s: %d of %d bytes stored, %d reported (point #%d)", kind, name, keep, len(p), n, d.n)
	return keep, n, &fs.PathError{Op: "write", Path: name, Err: errno}
}

// faultLocked draws a storage fault for op on name (after its persistence point passed).
func (d *disk) faultLocked(op errorfs.Op, name string) error {
	bucket := strings.HasPrefix(name, bucketDir+"/")
	switch {
	case op == errorfs.OpSync && bucket && d.rng.IntN(syncEIOOdds) == 0:
		d.faults["eio-bucket-sync"]++
		d.trace("fault eio-bucket-sync on %s (point #%d)", name, d.n)
		if err := d.mem.LosePending(name); err != nil {
			return err
		}
		return &fs.PathError{Op: "sync", Path: name, Err: syscall.EIO}
	case op == errorfs.OpWrite && bucket && d.rng.IntN(writeFullOdds) == 0:
		d.faults["enospc-bucket-write"]++
		d.trace("fault enospc-bucket-write on %s (point #%d)", name, d.n)
		return &fs.PathError{Op: "write", Path: name, Err: syscall.ENOSPC}
	case op == errorfs.OpWrite && strings.HasPrefix(name, walDir+"/") && d.rng.IntN(walEIOOdds) == 0:
		d.faults["eio-wal-write"]++
		d.trace("fault eio-wal-write on %s (point #%d)", name, d.n)
		return &fs.PathError{Op: "write", Path: name, Err: syscall.EIO}
	}
	return nil
}

// raftAppend appends cmd to the Raft log, a persistence point; it returns cmd's log index,
// and lost: the seed has the answer lost after the entry committed (a leader that lost its
// leadership as it applied: the caller must retry, and the FSM must not apply it twice).
func (d *disk) raftAppend(cmd []byte) (index uint64, lost bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.pointLocked("append", "raft", cmd); err != nil {
		return 0, false, err
	}
	d.log = append(d.log, cmd)
	return uint64(len(d.log)), d.rng.IntN(lostAnswerOdds) == 0, nil
}

// lostAnswerOdds: one Raft append in this many has its answer lost.
const lostAnswerOdds = 24

// lagOdds: one TxnResult lookup in this many answers as a lagging member's would.
const lagOdds = 8

// lagging draws whether a TxnResult lookup lags.
func (d *disk) lagging() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rng.IntN(lagOdds) == 0
}

// pointLocked passes one persistence point, kind on the file name. The power fails at the
// crashAt-th point or, with a focus, at an earlier point of the focus's signature from the
// (crashAt/2)-th on; it then captures the image (with cmd, a Raft append, kept in the log or not,
// as the seed chooses).
func (d *disk) pointLocked(kind, name string, cmd []byte) error {
	if d.off {
		return errPowerOff
	}
	d.n++
	sig := signature(kind, name, d.phase)
	d.seen[sig]++
	switch {
	case d.n == d.crashAt:
	case d.focus != "" && d.n >= d.crashAt/2 && sig == d.focus:
	default:
		return nil
	}
	log := d.log
	if cmd != nil && d.rng.IntN(2) == 0 {
		log = append(log[:len(log):len(log)], cmd)
	}
	mode := crashModes[d.rng.IntN(len(crashModes))]
	d.img = &image{
		fs:    d.mem.Crash(mode, d.rng),
		log:   log,
		model: d.model.afterCrash(),
		point: kind,
		mode:  mode.String(),
		sig:   sig,
		n:     d.n,
	}
	d.off = true
	if d.onOff != nil {
		d.onOff()
	}
	return errPowerOff
}

// powerOff reports whether the power has failed.
func (d *disk) powerOff() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.off
}
