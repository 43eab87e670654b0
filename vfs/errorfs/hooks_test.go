package errorfs

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/kvoffload/kvoffload/vfs/memfs"
)

func pass(Op, string) error { return nil }

// TestShortWrite: a Write hook's error stores p[:keep] and reports min(n, keep) bytes.
func TestShortWrite(t *testing.T) {
	for _, tc := range []struct{ keep, n, wantN int }{
		{3, 3, 3},  // a short write that says so
		{3, 0, 0},  // part stored, nothing reported
		{9, 9, 5},  // keep clamped to len(p)
		{-1, 2, 0}, // keep clamped to 0
		{0, 0, 0},  // nothing stored
	} {
		m := memfs.New()
		e := WrapHooks(m, pass, Hooks{Write: func(string, []byte, int64) (int, int, error) {
			return tc.keep, tc.n, syscall.EIO
		}})
		f, err := e.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		n, err := f.WriteAt([]byte("abcde"), 2)
		if n != tc.wantN || !errors.Is(err, syscall.EIO) {
			t.Fatalf("%+v: WriteAt = %d, %v; want %d, EIO", tc, n, err, tc.wantN)
		}
		size, _ := f.Size()
		if want := int64(2 + max(0, min(tc.keep, 5))); tc.keep > 0 && size != want || tc.keep <= 0 && size != 0 {
			t.Fatalf("%+v: file size %d after a short write", tc, size)
		}
	}
}

// TestWriteHookPasses: a Write hook without an error leaves the write whole.
func TestWriteHookPasses(t *testing.T) {
	e := WrapHooks(memfs.New(), pass, Hooks{Write: func(string, []byte, int64) (int, int, error) { return 0, 0, nil }})
	f, _ := e.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o644)
	if n, err := f.WriteAt([]byte("abc"), 0); n != 3 || err != nil {
		t.Fatalf("WriteAt = %d, %v", n, err)
	}
}

// TestReadHook: a Read hook changes the bytes the caller gets, once; the file keeps its own.
func TestReadHook(t *testing.T) {
	m := memfs.New()
	flips := 1
	e := WrapHooks(m, pass, Hooks{Read: func(_ string, p []byte, _ int64, n int, err error) (int, error) {
		if flips > 0 && n > 0 {
			flips--
			p[0] ^= 1
		}
		return n, err
	}})
	f, _ := e.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o644)
	if _, err := f.WriteAt([]byte("abc"), 0); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"`bc", "abc"} {
		got := make([]byte, 3)
		if n, err := f.ReadAt(got, 0); n != 3 || err != nil || !bytes.Equal(got, []byte(want)) {
			t.Fatalf("read %d: %q, %d, %v; want %q", i, got, n, err, want)
		}
	}
}
