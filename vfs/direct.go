package vfs

import "unsafe"

// DirectIOAlignment is the granularity of direct I/O on OSFS{DirectIO: true}, in bytes: a
// WriteAt bypasses the page cache only if its offset, length and buffer address are multiples
// of it (a filesystem block: ext4 serializes smaller O_DIRECT writes; see open(2),
// "O_DIRECT"). A ReadAt needs only the file's read alignment (DirectReadAlignment), at most
// this.
const DirectIOAlignment = 4096

// AlignedBuffer returns a zeroed buffer of n bytes whose first byte is
// DirectIOAlignment-aligned in memory, as O_DIRECT requires. Its capacity is n.
//
// A plain allocation of a multiple of DirectIOAlignment is usually aligned already (Go's
// allocator places such objects at multiples of their size class in page-aligned spans,
// and objects over 32 KiB on pages), so it is tried first and kept when aligned; otherwise
// n+DirectIOAlignment bytes are allocated and the buffer starts inside them.
func AlignedBuffer(n int) []byte {
	if n%DirectIOAlignment == 0 && n > 0 {
		if b := make([]byte, n); uintptr(unsafe.Pointer(unsafe.SliceData(b)))%DirectIOAlignment == 0 {
			return b
		}
	}
	raw := make([]byte, n+DirectIOAlignment)
	skip := 0
	if rem := int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))) % DirectIOAlignment); rem != 0 {
		skip = DirectIOAlignment - rem
	}
	return raw[skip : skip+n : skip+n]
}

// DirectIO reports whether f is an OSFS file on which O_DIRECT is in effect (false for a
// file whose filesystem refused O_DIRECT, and for every other FS).
func DirectIO(f File) bool {
	of, ok := f.(*osFile)
	return ok && of.direct
}

// DirectReadAlignment is the granularity at which a ReadAt of f bypasses the page cache, in
// bytes: the offset and length alignment the kernel reports for O_DIRECT on f (statx(2),
// STATX_DIOALIGN: 512 on the development VMs, the device's logical block size), or
// DirectIOAlignment when it reports none or more; 0 when f is not a direct-I/O OSFS file.
func DirectReadAlignment(f File) int64 {
	of, ok := f.(*osFile)
	if !ok || !of.direct {
		return 0
	}
	return of.readAlign
}

// ioAligned reports whether an I/O of p at off is aligned to align in offset and length, and
// to memAlign in memory.
func ioAligned(p []byte, off, align, memAlign int64) bool {
	if off%align != 0 || int64(len(p))%align != 0 {
		return false
	}
	return len(p) == 0 || int64(uintptr(unsafe.Pointer(unsafe.SliceData(p))))%memAlign == 0
}
