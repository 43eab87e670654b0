package vfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

const ext4Magic = 0xEF53

// requireDirect opens a file on OSFS{DirectIO: true} in dir and fails the test if O_DIRECT is
// not really in effect on ext4 (other filesystems may legitimately refuse it).
func requireDirect(tb testing.TB, dir string) *osFile {
	tb.Helper()
	f, err := OSFS{DirectIO: true}.OpenFile(filepath.Join(dir, "direct"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	of := f.(*osFile)
	flags, err := unix.FcntlInt(uintptr(of.fd), unix.F_GETFL, 0)
	if err != nil {
		tb.Fatal(err)
	}
	direct := of.direct && flags&unix.O_DIRECT != 0
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		tb.Fatal(err)
	}
	switch {
	case !direct && st.Type == ext4Magic:
		tb.Fatal("O_DIRECT not in effect on ext4")
	case !direct:
		tb.Skipf("filesystem %#x refused O_DIRECT", st.Type)
	}
	return of
}

func TestOSFSDirectIO(t *testing.T) {
	f := requireDirect(t, t.TempDir())
	data := AlignedBuffer(3 * DirectIOAlignment)
	copy(data, testkit.Payload(1, len(data)))
	mustWriteAt(t, f, data, DirectIOAlignment)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if f.buffered != nil {
		t.Fatal("aligned I/O went through the buffered descriptor")
	}
	got := AlignedBuffer(3 * DirectIOAlignment)
	if _, err := f.ReadAt(got, DirectIOAlignment); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("aligned read back: %v, equal %v", err, bytes.Equal(got, data))
	}
	// Unaligned I/O falls back to the buffered twin and stays coherent with direct I/O.
	mustWriteAt(t, f, []byte("hello"), DirectIOAlignment+10)
	small := make([]byte, 5)
	if _, err := f.ReadAt(small, DirectIOAlignment+10); err != nil || string(small) != "hello" {
		t.Fatalf("unaligned read: %q %v", small, err)
	}
	if _, err := f.ReadAt(got, DirectIOAlignment); err != nil || string(got[10:15]) != "hello" {
		t.Fatalf("direct read after buffered write: %q %v", got[10:15], err)
	}
	if f.buffered == nil {
		t.Fatal("unaligned I/O did not use the buffered descriptor")
	}
}

// TestOSFSDirectReadAlignment checks that a read aligned to the file's DirectReadAlignment
// (512 where the kernel reports it, as on the development VMs) but not to DirectIOAlignment
// stays on the O_DIRECT descriptor and returns the written bytes.
func TestOSFSDirectReadAlignment(t *testing.T) {
	f := requireDirect(t, t.TempDir())
	align := DirectReadAlignment(f)
	if align <= 0 || align > DirectIOAlignment || DirectIOAlignment%align != 0 {
		t.Fatalf("DirectReadAlignment %d: want a divisor of %d", align, DirectIOAlignment)
	}
	if align == DirectIOAlignment {
		t.Skipf("the kernel reports no direct-read alignment below %d here", DirectIOAlignment)
	}
	data := AlignedBuffer(4 * DirectIOAlignment)
	copy(data, testkit.Payload(2, len(data)))
	mustWriteAt(t, f, data, 0)
	n := DirectIOAlignment + align // spans a block boundary, starts inside a block
	got := AlignedBuffer(int(n))
	if _, err := f.ReadAt(got, align); err != nil || !bytes.Equal(got, data[align:align+n]) {
		t.Fatalf("read of %d bytes at %d: %v, equal %v", n, align, err, bytes.Equal(got, data[align:align+n]))
	}
	if f.buffered != nil {
		t.Fatalf("a read aligned to %d went through the buffered descriptor", align)
	}
	if DirectReadAlignment(&memOnly{}) != 0 {
		t.Fatal("DirectReadAlignment of a non-OSFS file is not 0")
	}
}

// memOnly is a File that is not an OSFS file.
type memOnly struct{ File }

func TestOSFSPunchHoleAllocated(t *testing.T) {
	f := requireDirect(t, t.TempDir())
	data := AlignedBuffer(4 * DirectIOAlignment)
	copy(data, bytes.Repeat([]byte{7}, len(data)))
	mustWriteAt(t, f, data, 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	check := func(wantAlloc, wantSize int64) {
		t.Helper()
		alloc, err := f.AllocatedBytes()
		if err != nil {
			t.Fatal(err)
		}
		size, err := f.Size()
		if err != nil {
			t.Fatal(err)
		}
		if alloc != wantAlloc || size != wantSize {
			t.Fatalf("allocated %d size %d, want %d %d", alloc, size, wantAlloc, wantSize)
		}
	}
	check(4*DirectIOAlignment, 4*DirectIOAlignment)
	if err := f.PunchHole(DirectIOAlignment, 2*DirectIOAlignment); err != nil {
		t.Fatal(err)
	}
	check(2*DirectIOAlignment, 4*DirectIOAlignment)
	got := AlignedBuffer(2 * DirectIOAlignment)
	if _, err := f.ReadAt(got, DirectIOAlignment); err != nil || !allZero(got) {
		t.Fatalf("punched range: err %v, zero %v", err, allZero(got))
	}
	if err := f.Truncate(DirectIOAlignment); err != nil {
		t.Fatal(err)
	}
	check(DirectIOAlignment, DirectIOAlignment)
}

func TestOSFSLockAndDir(t *testing.T) {
	dir := t.TempDir()
	o := OSFS{}
	l, err := o.Lock(filepath.Join(dir, "LOCK"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Lock(filepath.Join(dir, "LOCK")); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Lock: %v, want ErrLocked", err)
	}
	l.Close()
	l2, err := o.Lock(filepath.Join(dir, "LOCK"))
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	l2.Close()
	if err := o.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := o.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	names, err := o.ReadDir(dir)
	if err != nil || len(names) != 2 || names[0] != "LOCK" || names[1] != "sub" {
		t.Fatalf("ReadDir = %v, %v", names, err)
	}
	if err := o.Remove(filepath.Join(dir, "LOCK")); err != nil {
		t.Fatal(err)
	}
}

func TestAlignedBuffer(t *testing.T) {
	sizes := []int{1, 3*DirectIOAlignment + 7, 1 << 20, 8<<20 + DirectIOAlignment}
	for k := 1; k <= 64; k++ { // every small multiple: the plain allocation is tried first
		sizes = append(sizes, k*DirectIOAlignment, k*DirectIOAlignment)
	}
	for _, n := range sizes {
		b := AlignedBuffer(n)
		addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		if len(b) != n || cap(b) != n || addr%DirectIOAlignment != 0 || !allZero(b) {
			t.Fatalf("AlignedBuffer(%d): len %d cap %d address %#x", n, len(b), cap(b), addr)
		}
	}
}
