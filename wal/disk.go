package wal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/mutant"
	tidwall "github.com/kvoffload/kvoffload/third_party/tidwall/wal"
	"github.com/kvoffload/kvoffload/vfs"
)

// disk is the filesystem the log's files live on (Config.FS). Every file
// operation of the log, tidwall's included, goes through it, so a test can run
// the log on vfs/memfs and crash it at each of its persistence points.
//
// The durability contract is vfs's: a write is durable after Sync of its file;
// a creation, removal or rename after SyncDir of its directory. The log relies
// on exactly these: WriteBatch ends with Sync (the commit point), and every
// segment creation (afterWrite), truncation rename (TruncateFront) and tail
// repair (cutTail) is followed by syncDir before it is relied on.
type disk struct{ fs vfs.FS }

// maxSegmentBytes bounds the segment file the log reads whole: far above any it writes (a
// segment ends at SegmentSize plus one group commit), so that a file grown by damage is
// refused as corrupt instead of exhausting memory.
const maxSegmentBytes = 2 << 30

// readFile returns the whole content of the file at path, at most maxSegmentBytes.
func (d disk) readFile(path string) ([]byte, error) {
	f, err := d.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size > maxSegmentBytes {
		return nil, &CorruptError{File: path, Offset: maxSegmentBytes,
			Reason: fmt.Sprintf("the file is %d bytes, larger than any segment the log writes (at most %d read)", size, maxSegmentBytes)}
	}
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return data, nil
}

// size returns the size of the file at path.
func (d disk) size(path string) (int64, error) {
	f, err := d.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Size()
}

// makeDir creates dir if missing and makes its directory entry durable.
func (d disk) makeDir(dir string) error {
	if _, err := d.fs.ReadDir(dir); err == nil {
		return nil
	}
	if err := d.fs.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("wal: create directory: %w", err)
	}
	return d.syncDir(filepath.Dir(dir))
}

// syncDir makes the file creations, renames and removals in dir durable.
func (d disk) syncDir(dir string) error {
	if err := failpoint.Hit(failpoint.WALSyncDir); err != nil {
		return fmt.Errorf("wal: fsync directory %s: %w", dir, err)
	}
	if mutant.On(mutant.SkipWALDirSync) { // mutation test only
		return nil
	}
	if err := d.fs.SyncDir(dir); err != nil {
		return fmt.Errorf("wal: fsync directory %s: %w", dir, err)
	}
	return nil
}

// truncateFile cuts the file at path to size bytes and syncs it.
func (d disk) truncateFile(path string, size int64) error {
	f, err := d.fs.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tidwallFS is the disk as tidwall's file system (third_party/tidwall/wal,
// Options.FS).
type tidwallFS struct{ disk }

func (t tidwallFS) OpenFile(name string, flag int, perm os.FileMode) (tidwall.File, error) {
	f, err := t.fs.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &seqFile{File: f}, nil
}

func (t tidwallFS) ReadDir(dir string) ([]string, error)        { return t.fs.ReadDir(dir) }
func (t tidwallFS) Remove(name string) error                    { return t.fs.Remove(name) }
func (t tidwallFS) Rename(oldname, newname string) error        { return t.fs.Rename(oldname, newname) }
func (t tidwallFS) MkdirAll(dir string, perm os.FileMode) error { return t.fs.MkdirAll(dir, perm) }

// seqFile gives a vfs.File the sequential Read, Write and Seek that tidwall
// uses: one offset, advanced by each Read and Write. tidwall uses a file from
// one goroutine at a time (under its lock).
type seqFile struct {
	vfs.File
	off int64
}

func (f *seqFile) Read(p []byte) (int, error) {
	n, err := f.ReadAt(p, f.off)
	f.off += int64(n)
	if errors.Is(err, io.EOF) && n > 0 {
		err = nil
	}
	return n, err
}

func (f *seqFile) Write(p []byte) (int, error) {
	n, err := f.WriteAt(p, f.off)
	f.off += int64(n)
	return n, err
}

func (f *seqFile) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		f.off = offset
	case io.SeekCurrent:
		f.off += offset
	case io.SeekEnd:
		size, err := f.Size()
		if err != nil {
			return 0, err
		}
		f.off = size + offset
	}
	if f.off < 0 {
		f.off = 0
		return 0, &fs.PathError{Op: "seek", Err: fs.ErrInvalid}
	}
	return f.off, nil
}
