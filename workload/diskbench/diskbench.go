// Package diskbench measures the disk's own limits in the directory the store uses
// (SeqWriteLimit, the sequential-write limit; Run for fio-like jobs with several I/Os in
// flight), so throughput figures can be reported as a ratio against it, measured in the same
// run (on the development VMs: ~1.8 GiB/s O_DIRECT, 0.35-0.65 GiB/s through the page cache).
package diskbench

import "unsafe"

// aligned returns n bytes aligned to 4096, as O_DIRECT requires.
func aligned(n int) []byte {
	const a = 4096
	b := make([]byte, n+a)
	off := a - int(uintptr(unsafe.Pointer(&b[0]))%a)
	if off == a {
		off = 0
	}
	return b[off : off+n]
}
