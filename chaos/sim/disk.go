package sim

import (
	"errors"
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
