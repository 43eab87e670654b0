package vfs

import "testing"

func mustWriteAt(tb testing.TB, f File, p []byte, off int64) {
	tb.Helper()
	if _, err := f.WriteAt(p, off); err != nil {
		tb.Fatalf("WriteAt: %v", err)
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
