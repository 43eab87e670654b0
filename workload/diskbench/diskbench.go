// Package diskbench measures the disk's own limits in the directory the store
// uses (SeqWrite; Run for fio-like jobs with several I/Os in flight), so throughput figures can be reported as a ratio against it, measured in the same run
// (on the development VMs: ~1.8 GiB/s O_DIRECT, 0.35-0.65 GiB/s through the page cache).
package diskbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Result is one measurement.
type Result struct {
	Bytes    int64
	Elapsed  time.Duration
	Direct   bool // O_DIRECT was used (false: the filesystem refused it)
	MBPerSec float64
}

// SeqWrite writes total bytes in 1 MiB blocks to a scratch file in dir with O_DIRECT (buffered
// if the filesystem refuses O_DIRECT), then fdatasyncs it, and removes the file. It reports
// MB/s (10^6 bytes per second) including the final fdatasync.
func SeqWrite(ctx context.Context, dir string, total int64) (Result, error) {
	const block = 1 << 20
	path := filepath.Join(dir, fmt.Sprintf(".diskbench-%d", os.Getpid()))
	defer os.Remove(path)
	direct := true
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|unix.O_DIRECT, 0o640)
	if err != nil {
		direct = false
		if f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640); err != nil {
			return Result{}, fmt.Errorf("diskbench: %w", err)
		}
	}
	defer f.Close()
	buf := aligned(block)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	start := time.Now()
	var off int64
	for ; off < total; off += block {
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("diskbench: %w", err)
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			return Result{}, fmt.Errorf("diskbench: write: %w", err)
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return Result{}, fmt.Errorf("diskbench: fdatasync: %w", err)
	}
	el := time.Since(start)
	return Result{Bytes: off, Elapsed: el, Direct: direct, MBPerSec: float64(off) / 1e6 / el.Seconds()}, nil
}

func aligned(n int) []byte {
	const a = 4096
	b := make([]byte, n+a)
	off := a - int(uintptr(unsafe.Pointer(&b[0]))%a)
	if off == a {
		off = 0
	}
	return b[off : off+n]
}
