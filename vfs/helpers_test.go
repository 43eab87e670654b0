package vfs

import (
	"math/rand/v2"
	"testing"
)

// testPayload returns n bytes derived from seed.
func testPayload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

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
