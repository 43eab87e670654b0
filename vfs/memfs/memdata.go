package memfs

import (
	"io"
	"math/rand/v2"
)

// memBlockSize is the allocation unit of FS in bytes, like an ext4 block.
const memBlockSize = 4096

// blockUp rounds n up to a multiple of memBlockSize.
func blockUp(n int64) int64 { return (n + memBlockSize - 1) &^ (memBlockSize - 1) }

// memData is sparse file content: absent blocks read as zeros and are not allocated.
type memData struct {
	size   int64
	blocks map[int64]*[memBlockSize]byte
}

func newMemData() memData { return memData{blocks: map[int64]*[memBlockSize]byte{}} }

func (d memData) clone() memData {
	c := memData{size: d.size, blocks: make(map[int64]*[memBlockSize]byte, len(d.blocks))}
	for i, b := range d.blocks {
		nb := *b
		c.blocks[i] = &nb
	}
	return c
}

func (d *memData) readAt(p []byte, off int64) (int, error) {
	if off >= d.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), d.size-off))
	for done := 0; done < n; {
		pos := off + int64(done)
		idx, in := pos/memBlockSize, int(pos%memBlockSize)
		chunk := min(n-done, memBlockSize-in)
		if b := d.blocks[idx]; b != nil {
			copy(p[done:done+chunk], b[in:])
		} else {
			clear(p[done : done+chunk])
		}
		done += chunk
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (d *memData) writeAt(p []byte, off int64) {
	if len(p) == 0 {
		return
	}
	for done := 0; done < len(p); {
		pos := off + int64(done)
		idx, in := pos/memBlockSize, int(pos%memBlockSize)
		b := d.blocks[idx]
		if b == nil {
			b = new([memBlockSize]byte)
			d.blocks[idx] = b
		}
		done += copy(b[in:], p[done:])
	}
	d.size = max(d.size, off+int64(len(p)))
}

// zero frees the blocks fully inside [off, end) and zeroes the covered part of the others.
func (d *memData) zero(off, end int64) {
	for pos := off; pos < end; {
		idx, in := pos/memBlockSize, pos%memBlockSize
		chunk := min(end-pos, memBlockSize-in)
		if chunk == memBlockSize {
			delete(d.blocks, idx)
		} else if b := d.blocks[idx]; b != nil {
			clear(b[in : in+chunk])
		}
		pos += chunk
	}
}

func (d *memData) truncate(size int64) {
	if size < d.size {
		d.zero(size, blockUp(d.size))
	}
	d.size = size
}

func (d *memData) punch(off, length int64) { d.zero(off, min(off+length, d.size)) }

func (d *memData) allocated() int64 { return int64(len(d.blocks)) * memBlockSize }

type memOpKind uint8

const (
	memWrite memOpKind = iota
	memTruncate
	memPunch
)

// memOp is one unsynced change to a file.
type memOp struct {
	kind memOpKind
	off  int64 // write/punch offset, truncate size
	n    int64 // punch length
	data []byte
	seq  uint64 // the FS's operation number: its place among every file's and directory's
	prev int64  // the file size before the op: a write ending past it extends the file
}

// extends reports whether op is a write that grew the file.
func (op memOp) extends() bool { return op.kind == memWrite && op.off+int64(len(op.data)) > op.prev }

func (d *memData) apply(op memOp) {
	switch op.kind {
	case memWrite:
		d.writeAt(op.data, op.off)
	case memTruncate:
		d.truncate(op.off)
	case memPunch:
		d.punch(op.off, op.n)
	}
}

// crashed returns the content a power loss could leave: the durable content plus the
// pending operations that mode and rng let survive.
func crashed(durable memData, pending []memOp, mode CrashMode, rng *rand.Rand) memData {
	d := durable.clone()
	switch mode {
	case CrashPrefix:
		for _, op := range pending[:rng.IntN(len(pending)+1)] {
			d.apply(op)
		}
	case CrashTorn:
		survivors := make([]memOp, 0, len(pending))
		for _, op := range pending {
			if rng.IntN(2) == 0 {
				survivors = append(survivors, op)
			}
		}
		tearLastWrite(survivors, rng)
		for _, op := range survivors {
			d.apply(op)
		}
	}
	return d
}

// tearLastWrite cuts the last write of ops to a strict prefix ending at a 512-byte file
// offset boundary (possibly empty), as a sector-atomic disk would leave it.
func tearLastWrite(ops []memOp, rng *rand.Rand) {
	for i := len(ops) - 1; i >= 0; i-- {
		if ops[i].kind != memWrite {
			continue
		}
		op := ops[i]
		end := op.off + int64(len(op.data))
		first := (op.off + 511) &^ 511 // first sector boundary at or after off
		keep := int64(0)
		if first < end {
			boundaries := (end-1-first)/512 + 1
			keep = first + 512*rng.Int64N(boundaries) - op.off
		}
		op.data = op.data[:keep]
		ops[i] = op
		return
	}
}
