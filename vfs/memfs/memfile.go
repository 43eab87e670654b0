package memfs

import (
	"io/fs"
	"slices"
)

// memFile is an open FS file. It keeps working after its name is removed.
type memFile struct {
	fs       *FS
	name     string
	ino      *memInode
	writable bool
	closed   bool
}

// do runs fn under the FS mutex after checking that the file is open, writable if write,
// and that off is not negative.
func (f *memFile) do(op string, write bool, off int64, fn func() error) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	switch {
	case f.closed:
		return &fs.PathError{Op: op, Path: f.name, Err: fs.ErrClosed}
	case write && !f.writable:
		return &fs.PathError{Op: op, Path: f.name, Err: fs.ErrPermission}
	case off < 0:
		return &fs.PathError{Op: op, Path: f.name, Err: fs.ErrInvalid}
	}
	return fn()
}

// record applies op to the current content and queues it as pending, numbered; a truncate
// or punch also enters the journal, and a write that grows the file marks the inode changed
// in the running transaction. fs.mu must be held.
func (f *memFile) record(op memOp) error {
	f.fs.jnl.seq++
	op.seq, op.prev = f.fs.jnl.seq, f.ino.cur.size
	switch {
	case op.kind != memWrite:
		f.fs.jnl.seqs = append(f.fs.jnl.seqs, op.seq)
		f.ino.jseq = op.seq
	case op.extends():
		f.ino.jseq = op.seq
	}
	f.ino.cur.apply(op)
	f.ino.pending = append(f.ino.pending, op)
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (n int, err error) {
	err = f.do("read", false, off, func() error {
		n, err = f.ino.cur.readAt(p, off)
		return err
	})
	return n, err
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	err := f.do("write", true, off, func() error {
		return f.record(memOp{kind: memWrite, off: off, data: slices.Clone(p)})
	})
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Sync makes every pending operation of the file durable and, if the file's inode changed in
// the running journal transaction (created, truncated, punched or grown since the last
// commit), commits the journal: every metadata operation of the FS before it.
func (f *memFile) Sync() error {
	return f.do("sync", false, 0, func() error {
		for _, op := range f.ino.pending {
			f.ino.durable.apply(op)
		}
		f.ino.pending = nil
		if f.ino.jseq > f.fs.jnl.committed {
			f.fs.commit() // the inode changed in the running transaction: fsync commits it
		}
		return nil
	})
}

func (f *memFile) Truncate(size int64) error {
	return f.do("truncate", true, size, func() error {
		return f.record(memOp{kind: memTruncate, off: size})
	})
}

func (f *memFile) Size() (size int64, err error) {
	err = f.do("stat", false, 0, func() error {
		size = f.ino.cur.size
		return nil
	})
	return size, err
}

func (f *memFile) PunchHole(off, length int64) error {
	// min(off, length) makes do reject a negative offset or length.
	return f.do("punch", true, min(off, length), func() error {
		return f.record(memOp{kind: memPunch, off: off, n: length})
	})
}

func (f *memFile) AllocatedBytes() (n int64, err error) {
	err = f.do("stat", false, 0, func() error {
		n = f.ino.cur.allocated()
		return nil
	})
	return n, err
}

func (f *memFile) Close() error {
	return f.do("close", false, 0, func() error {
		f.closed = true
		return nil
	})
}
