package transport

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Pool is a mem.BufferPool of power-of-two size classes from 2^minClass to 2^maxClass bytes
// that hands buffers out without zeroing them; a larger request is allocated and not kept.
// A buffer of n bytes comes from the smallest class that holds n, so at most half of it is
// spare (grpc-go's default pool has classes 256 B, 4, 16, 32 KiB and 1 MiB: a 256 KiB message
// takes a 1 MiB buffer, all of it cleared).
type Pool struct {
	classes [maxClass - minClass + 1]sync.Pool
}

const (
	minClass = 12 // 4 KiB
	maxClass = 24 // 16 MiB: the largest message (a 1 MiB chunk, or a batch's keys and results)
)

var pool = &Pool{}

var _ mem.BufferPool = (*Pool)(nil)

// class is the index of the smallest class that holds n bytes, or -1 when none does.
func class(n int) int {
	if n <= 1<<minClass {
		return 0
	}
	c := bits.Len(uint(n - 1))
	if c > maxClass {
		return -1
	}
	return c - minClass
}

// Get returns a buffer of length n; its bytes are whatever it held before.
func (p *Pool) Get(n int) *[]byte {
	c := class(n)
	if c < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(c+minClass))
	return &b
}

// Put keeps b for reuse when its capacity is exactly one of the classes.
func (p *Pool) Put(b *[]byte) {
	n := cap(*b)
	c := class(n)
	if c < 0 || n != 1<<(c+minClass) {
		return
	}
	*b = (*b)[:0]
	p.classes[c].Put(b)
}
