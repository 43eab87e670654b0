package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvoffload/kvoffload/internal/tmpfs"
)

// TestTruncateFrontWithoutRoom: on a full filesystem TruncateFront cannot write the copy
// of the segment that is to start the log; it returns ErrNotTruncated and changes nothing:
// the Log is not fail-stopped, keeps every entry, and truncates once there is room.
func TestTruncateFrontWithoutRoom(t *testing.T) {
	mnt := tmpfs.Mount(t, "8m")
	cfg := testConfig(t, filepath.Join(mnt, "wal"))
	cfg.SegmentSize = 64 << 10
	l, _ := mustOpen(t, cfg)
	var last uint64
	for i := 0; i < 64; i++ { // several segments, so the truncation copies the last one
		idx, err := l.Append(Record{Type: RecordDone, TxnID: [16]byte{byte(i), 1}})
		if err != nil {
			t.Fatal(err)
		}
		last = idx
	}
	filler := filepath.Join(mnt, "filler")
	fillUp(t, filler)
	first := l.FirstIndex()
	err := l.TruncateFront(last)
	if !errors.Is(err, ErrNotTruncated) || errors.Is(err, ErrFailed) {
		t.Fatalf("TruncateFront on a full disk: %v, want ErrNotTruncated and no fail-stop", err)
	}
	if l.FirstIndex() != first || l.LastIndex() != last {
		t.Fatalf("after the failed truncation: [%d, %d], want [%d, %d] unchanged", l.FirstIndex(), l.LastIndex(), first, last)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(Record{Type: RecordDone, TxnID: [16]byte{0xff, 1}}); err != nil {
		t.Fatalf("Append after room was freed: %v", err)
	}
	if err := l.TruncateFront(last); err != nil || l.FirstIndex() != last {
		t.Fatalf("TruncateFront with room: %v, first %d, want %d", err, l.FirstIndex(), last)
	}
}

// fillUp writes path until the filesystem is full.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	for n := 4096; n > 0; n /= 2 { // the last partial blocks
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
}

// Only want of space on the .START copy leaves the log as it was and usable; any other
// error writing it (EIO, EMFILE) is a fault of the filesystem and fail-stops the log.
func TestStartNotWrittenOnlyForSpace(t *testing.T) {
	for _, c := range []struct {
		errno syscall.Errno
		want  bool
	}{{syscall.ENOSPC, true}, {syscall.EDQUOT, true}, {syscall.EIO, false}, {syscall.EMFILE, false}, {syscall.EROFS, false}} {
		err := fmt.Errorf("failed to create start segment: %w", &os.PathError{Op: "write", Path: "x.START.TEMP", Err: c.errno})
		if got := startNotWritten(err); got != c.want {
			t.Errorf("%v: startNotWritten %v, want %v", c.errno, got, c.want)
		}
	}
	if startNotWritten(fmt.Errorf("rename: %w", syscall.ENOSPC)) {
		t.Error("an error after the copy was written counts as none written")
	}
}
