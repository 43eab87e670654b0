package vfs

import "unsafe"

// DirectIOAlignment is the granularity of direct I/O on OSFS{DirectIO: true}, in bytes: a
// ReadAt or WriteAt bypasses the page cache only if its offset, length and buffer address are
// multiples of it (the logical block size of the devices the store runs on; see open(2),
// "O_DIRECT").
const DirectIOAlignment = 4096

// AlignedBuffer returns a zeroed buffer of n bytes whose first byte is
// DirectIOAlignment-aligned in memory, as O_DIRECT requires. Its capacity is n.
func AlignedBuffer(n int) []byte {
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

func ioAligned(p []byte, off int64) bool {
	if off%DirectIOAlignment != 0 || len(p)%DirectIOAlignment != 0 {
		return false
	}
	return len(p) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(p)))%DirectIOAlignment == 0
}
