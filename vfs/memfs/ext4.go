package memfs

import (
	"maps"
	"math/rand/v2"
)

// journal is CrashExt4Ordered's view of the FS: every operation is numbered, and the
// metadata operations since the last commit (JBD2's one running transaction) are kept in
// order, so that a crash can keep a prefix of them.
type journal struct {
	seq       uint64   // the last operation's number
	committed uint64   // the number of the last operation before the last commit
	seqs      []uint64 // the numbers of the metadata operations since, in order
	ops       []nsOp   // the directory entry changes among them, in order
}

type nsKind uint8

const (
	nsCreate nsKind = iota
	nsUnlink
	nsRename
)

// nsOp is a change of directory entries: dir/name created (for ino), unlinked, or renamed to
// ndir/nname.
type nsOp struct {
	seq         uint64
	kind        nsKind
	dir, name   string
	ndir, nname string
	ino         *memInode
}

// logEntry numbers op, a change of directory entries just made, and journals it; fs.mu must
// be held. It returns op's number.
func (m *FS) logEntry(op nsOp) uint64 {
	m.jnl.seq++
	op.seq = m.jnl.seq
	m.jnl.seqs = append(m.jnl.seqs, op.seq)
	m.jnl.ops = append(m.jnl.ops, op)
	m.dirs[op.dir].jseq = op.seq
	if op.kind == nsRename {
		m.dirs[op.ndir].jseq = op.seq
	}
	return op.seq
}

// commit commits the running transaction: every directory's entries as they are now
// become what any crash keeps; fs.mu must be held.
func (m *FS) commit() {
	for _, d := range m.dirs {
		d.committed = maps.Clone(d.names)
	}
	m.jnl.committed, m.jnl.seqs, m.jnl.ops = m.jnl.seq, nil, nil
}

// crashExt4 is Crash(CrashExt4Ordered): the journal is cut before a random one of its
// entries (or kept whole), every directory holds its committed entries changed by the
// entries before the cut, and each file reachable there holds what ext4Crashed leaves.
// fs.mu must be held.
func (m *FS) crashExt4(rng *rand.Rand) *FS {
	cut := m.jnl.seq + 1 // operations numbered below cut are committed
	if k := rng.IntN(len(m.jnl.seqs) + 1); k < len(m.jnl.seqs) {
		cut = m.jnl.seqs[k]
	}
	entries := map[string]map[string]*memInode{}
	for p, d := range m.dirs {
		entries[p] = maps.Clone(d.committed)
	}
	for _, op := range m.jnl.ops {
		if op.seq >= cut {
			break
		}
		switch op.kind {
		case nsCreate:
			entries[op.dir][op.name] = op.ino
		case nsUnlink:
			delete(entries[op.dir], op.name)
		case nsRename:
			delete(entries[op.dir], op.name)
			entries[op.ndir][op.nname] = op.ino
		}
	}
	c := &FS{dirs: map[string]*memDir{}, locks: map[string]bool{}}
	made := map[*memInode]*memInode{}
	for _, p := range sortedKeys(m.dirs) {
		c.mkdir(p)
		nd := c.dirs[p]
		for _, n := range sortedKeys(entries[p]) {
			ino := entries[p][n]
			ni := made[ino]
			if ni == nil {
				data := ext4Crashed(ino.durable, ino.pending, cut, rng)
				ni = &memInode{durable: data, cur: data.clone()}
				made[ino] = ni
			}
			nd.names[n], nd.durable[n], nd.committed[n] = ni, ni, ni
		}
	}
	return c
}

// ext4Crashed returns the content a crash leaves of a file with durable content and pending
// operations when the journal keeps the operations numbered below cut:
//   - a truncate or punch is metadata: kept when numbered below cut;
//   - a write's bytes below the file's size at that point (an overwrite) survive per 4 KiB
//     page of the write: lost, kept, or torn (each of its 512-byte sectors kept or not);
//   - the bytes a write adds past the file's size (an append) reach the disk, and the size
//     grows over them, only together: the file's appends land as a prefix, in the order
//     they were made, and only those numbered below cut (their size change commits after
//     them).
func ext4Crashed(durable memData, pending []memOp, cut uint64, rng *rand.Rand) memData {
	d := durable.clone()
	appends := 0 // the appends that may land
	for _, op := range pending {
		if op.extends() && op.seq < cut {
			appends++
		}
	}
	land := rng.IntN(appends + 1)
	for _, op := range pending {
		switch {
		case op.kind != memWrite:
			if op.seq < cut {
				d.apply(op)
			}
		default:
			end := op.off + int64(len(op.data))
			if inside := min(end, d.size); inside > op.off {
				writePages(&d, op.data[:inside-op.off], op.off, rng)
			}
			if op.extends() && land > 0 {
				land--
				if from := max(op.off, d.size); from < end {
					d.writeAt(op.data[from-op.off:], from)
				}
			}
		}
	}
	return d
}

// writePages writes p at off into d page by page, each page's part lost, kept whole, or torn
// at 512-byte file offsets (each sector kept or not), as unordered writeback of overwritten
// pages may leave them.
func writePages(d *memData, p []byte, off int64, rng *rand.Rand) {
	end := off + int64(len(p))
	for pos := off; pos < end; {
		next := min(end, (pos/memBlockSize+1)*memBlockSize)
		switch rng.IntN(3) {
		case 1:
			d.writeAt(p[pos-off:next-off], pos)
		case 2:
			for s := pos; s < next; {
				se := min(next, (s/512+1)*512)
				if rng.IntN(2) == 0 {
					d.writeAt(p[s-off:se-off], s)
				}
				s = se
			}
		}
		pos = next
	}
}
