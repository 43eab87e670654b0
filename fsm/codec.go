package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/cespare/xxhash/v2"
)

// Command wire format: the bytes of every Raft log entry the FSM applies. The constants
// below, and the numbering of CommandType (types.go), are wire format.
//
//	byte 0     CommandType: 1 Commit, 2 Abort, 3 Remove, 4 Member, 5 Prune, 6 Cluster
//	byte 1     format version: commandVersion (1), or memberVersion (2) for a Member
//	           command, whose member record carries the peer address too (version 1
//	           Member commands are still read)
//	bytes 2..  body, fields in the order listed, no padding:
//
//	Commit: txn [16]byte | node str | n uvarint | n x cmdEntry
//	Abort:  txn [16]byte | node str | reason str
//	Remove: txn [16]byte | n uvarint | n x (key str | gen uvarint) | reason str
//	Member: txn [16]byte | remove byte (0/1) | member
//	Prune:  txn [16]byte | before uvarint   (drop txn results applied below this raft index)
//	Cluster: txn [16]byte | id str   (id non-empty)
//
//	cmdEntry: key str | bucket uvarint | offset varint | length varint |
//	          size uvarint | sum uint64 little-endian | gen uvarint
//	member:   node str | raft addr str | api addr str | peer addr str   (node non-empty;
//	          version 1 Member commands have no peer addr)
//	str:      uvarint length | bytes
//
// Integers are little endian; varint is zigzag. Entry.Owner and Entry.TxnID are not
// encoded: they come from the command. Encoding is deterministic; Decode rejects trailing
// bytes and never panics (FuzzDecode), while ApplyCommand panics on a command it cannot
// decode or does not know (doc.go): replicas must not silently diverge.
const (
	commandVersion = 1
	memberVersion  = 2
)

// maxStreamField bounds one string read from a stream (snapshots), so a
// corrupt length cannot allocate unbounded memory. Commands are bounded by
// their own length instead.
const maxStreamField = 64 << 20

// encoder appends fields to buf.
type encoder struct{ buf []byte }

func (e *encoder) byte1(b byte)         { e.buf = append(e.buf, b) }
func (e *encoder) uvarint(v uint64)     { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *encoder) varint(v int64)       { e.buf = binary.AppendVarint(e.buf, v) }
func (e *encoder) u64(v uint64)         { e.buf = binary.LittleEndian.AppendUint64(e.buf, v) }
func (e *encoder) txn(t TxnID)          { e.buf = append(e.buf, t[:]...) }
func (e *encoder) str(s string)         { e.uvarint(uint64(len(s))); e.buf = append(e.buf, s...) }
func (e *encoder) bool1(b bool)         { e.byte1(boolByte(b)) }
func (e *encoder) header(t CommandType) { e.byte1(byte(t)); e.byte1(commandVersion) }

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// cmdEntry writes the command form of an entry (no Owner, no TxnID).
func (e *encoder) cmdEntry(x Entry) {
	e.str(x.Key)
	e.uvarint(uint64(x.Extent.Bucket))
	e.varint(x.Extent.Offset)
	e.varint(x.Extent.Length)
	e.uvarint(uint64(x.Size))
	e.u64(x.Sum)
	e.uvarint(x.Gen)
}

// fullEntry writes every field of an entry (snapshots and Hash).
func (e *encoder) fullEntry(x Entry) {
	e.cmdEntry(x)
	e.str(x.Owner)
	e.txn(x.TxnID)
}

// member writes a member record (commands, snapshots and Hash).
func (e *encoder) member(m Member) {
	e.str(m.NodeID)
	e.str(m.RaftAddr)
	e.str(m.APIAddr)
	e.str(m.PeerAddr)
}

// entries writes a node and its entries (no Owner, no TxnID): a COMMIT's body after its txn.
func (e *encoder) entries(node string, xs []Entry) {
	e.str(node)
	e.uvarint(uint64(len(xs)))
	for _, x := range xs {
		e.cmdEntry(x)
	}
}

// EncodeCommit encodes c for raft. Deterministic.
func EncodeCommit(c Commit) []byte {
	e := encoder{buf: make([]byte, 0, 32+len(c.Node)+len(c.Entries)*64)}
	e.header(CmdCommit)
	e.txn(c.TxnID)
	e.entries(c.Node, c.Entries)
	return e.buf
}

// AppendEntries appends node and entries to b as a COMMIT carries them after its txn ID
// (node str | n uvarint | n x cmdEntry; Owner and TxnID are not written). It is the body a
// WAL INTENT shares with the COMMIT it becomes (txn/intent.go), versioned apart from it, so
// the one Entry and the one reader (DecodeEntries) serve both. Deterministic.
func AppendEntries(b []byte, node string, entries []Entry) []byte {
	e := encoder{buf: b}
	e.entries(node, entries)
	return e.buf
}

// DecodeEntries reads all of b as AppendEntries wrote it; the entries' Owner and TxnID are
// zero. It never panics: a malformed b is an error wrapping ErrShortCommand or ErrBadCommand.
func DecodeEntries(b []byte) (node string, entries []Entry, err error) {
	d := &decoder{mem: b}
	node, entries = d.entries()
	if d.err == nil && len(d.mem) != 0 {
		d.fail(fmt.Errorf("%w: entries have %d trailing bytes", ErrBadCommand, len(d.mem)))
	}
	if d.err != nil {
		return "", nil, d.err
	}
	return node, entries, nil
}

// EncodeAbort encodes a for raft. Deterministic.
func EncodeAbort(a Abort) []byte {
	e := encoder{buf: make([]byte, 0, 32+len(a.Node)+len(a.Reason))}
	e.header(CmdAbort)
	e.txn(a.TxnID)
	e.str(a.Node)
	e.str(a.Reason)
	return e.buf
}

// EncodeRemove encodes r for raft. Deterministic.
func EncodeRemove(r Remove) []byte {
	e := encoder{buf: make([]byte, 0, 32+len(r.Reason)+len(r.Keys)*48)}
	e.header(CmdRemove)
	e.txn(r.TxnID)
	e.uvarint(uint64(len(r.Keys)))
	for _, k := range r.Keys {
		e.str(k.Key)
		e.uvarint(k.Gen)
	}
	e.str(r.Reason)
	return e.buf
}

// EncodeSetMember encodes m for raft. Deterministic. Decode (and so Propose)
// rejects an empty Member.NodeID.
func EncodeSetMember(m SetMember) []byte {
	e := encoder{buf: make([]byte, 0, 24+len(m.Member.NodeID)+len(m.Member.RaftAddr)+len(m.Member.APIAddr)+len(m.Member.PeerAddr))}
	e.byte1(byte(CmdMember))
	e.byte1(memberVersion)
	e.txn(m.TxnID)
	e.bool1(m.Remove)
	e.member(m.Member)
	return e.buf
}

// EncodeSetCluster encodes c for raft. Deterministic. Decode rejects an empty ID.
func EncodeSetCluster(c SetCluster) []byte {
	e := encoder{buf: make([]byte, 0, 24+len(c.ID))}
	e.header(CmdCluster)
	e.txn(c.TxnID)
	e.str(c.ID)
	return e.buf
}

// EncodePrune encodes p for raft. Deterministic.
func EncodePrune(p Prune) []byte {
	e := encoder{buf: make([]byte, 0, 32)}
	e.header(CmdPrune)
	e.txn(p.TxnID)
	e.uvarint(p.Before)
	return e.buf
}

// decoder reads fields with a sticky error: after the first failure every
// read returns zero values and err keeps the first cause.
//
// It reads from mem: all of a command or result, or for a stream (a snapshot, src) a window
// of it that fill refills, feeding the bytes consumed to sum. The fields are decoded from
// the bytes in mem, not through an io.ByteReader (a method call per varint byte and, for a
// snapshot, a digest write per field): decoding a COMMIT went from ~150 to ~120 ns per key
// (BenchmarkDecodeCommit), a 1M-key snapshot restore from 1.60 to 1.37 µs per key (node's
// BenchmarkStartup -startup-snapshot).
type decoder struct {
	mem []byte // the bytes not read yet: all that is left, or the unread tail of win
	err error

	// A stream's window: win holds the bytes read from src last, mem is its tail; the first
	// hashed bytes of win were written to sum, the rest of what precedes mem is not yet.
	src    io.Reader
	srcErr error // src's error, once it gave one (io.EOF at its end)
	win    []byte
	hashed int
	sum    *xxhash.Digest

	// owner is the last entry owner read (fullEntry): a snapshot names one owner per node for
	// a million entries, so an owner equal to it is not allocated again.
	owner string
}

// streamWindow is the bytes a stream decoder reads from its source at a time.
const streamWindow = 64 << 10

// newStreamDecoder decodes r, feeding every byte it consumes to an xxhash64 digest (digest).
func newStreamDecoder(r io.Reader) *decoder {
	return &decoder{src: r, win: make([]byte, 0, streamWindow), sum: xxhash.New()}
}

// fill makes at least n bytes available in mem, reading a stream's next bytes when fewer are
// left; it returns the reason it could not (io.ErrUnexpectedEOF: the bytes end first).
func (d *decoder) fill(n int) error {
	if len(d.mem) >= n {
		return nil
	}
	if d.src == nil || d.srcErr != nil {
		return d.short()
	}
	d.hashConsumed()
	buf := d.win[:cap(d.win)]
	if cap(d.win) < n {
		buf = make([]byte, max(n, 2*cap(d.win)))
	}
	k := copy(buf, d.mem)
	m, err := readAtLeast(d.src, buf[k:], n-k)
	if err != nil {
		d.srcErr = err
	}
	d.win, d.hashed = buf[:k+m], 0
	d.mem = d.win
	if len(d.mem) < n {
		return d.short()
	}
	return nil
}

// readAtLeast is io.ReadAtLeast, except that a reader that returns no bytes and no error
// maxEmptyReads times in a row fails with io.ErrNoProgress (as bufio.Reader does) instead of
// being called forever, and that the end of r is io.EOF however many bytes came before it.
func readAtLeast(r io.Reader, buf []byte, atLeast int) (int, error) {
	n, empty := 0, 0
	for n < atLeast {
		m, err := r.Read(buf[n:])
		n += m
		switch {
		case err != nil:
			return n, err
		case m > 0:
			empty = 0
		default:
			if empty++; empty >= maxEmptyReads {
				return n, io.ErrNoProgress
			}
		}
	}
	return n, nil
}

// maxEmptyReads is bufio's limit on reads that return nothing.
const maxEmptyReads = 100

// short is why fewer bytes are left than a field needs: src's error, or io.ErrUnexpectedEOF.
func (d *decoder) short() error {
	if d.srcErr != nil && d.srcErr != io.EOF {
		return d.srcErr
	}
	return io.ErrUnexpectedEOF
}

// hashConsumed writes the window's bytes consumed since the last call to sum.
func (d *decoder) hashConsumed() {
	if consumed := len(d.win) - len(d.mem); consumed > d.hashed {
		_, _ = d.sum.Write(d.win[d.hashed:consumed])
		d.hashed = consumed
	}
}

// digest returns the xxhash64 of every byte of the stream consumed so far.
func (d *decoder) digest() uint64 {
	d.hashConsumed()
	return d.sum.Sum64()
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

// eof turns an io error into the decoder's truncation error.
func (d *decoder) eof(what string, err error) {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		d.fail(fmt.Errorf("%w: reading %s", ErrShortCommand, what))
		return
	}
	d.fail(fmt.Errorf("fsm: reading %s: %w", what, err))
}

func (d *decoder) byte1(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.mem) == 0 {
		if err := d.fill(1); err != nil {
			d.eof(what, err)
			return 0
		}
	}
	b := d.mem[0]
	d.mem = d.mem[1:]
	return b
}

func (d *decoder) bool1(what string) bool {
	switch b := d.byte1(what); b {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail(fmt.Errorf("%w: %s: bool byte %d", ErrBadCommand, what, b))
		return false
	}
}

func (d *decoder) uvarint(what string) uint64 { return d.uvarintOf(what, "") }

// uvarintOf is uvarint of the field named what+suffix, joined only for an error: str reads
// every string's length through it, and joining the name each time cost an allocation per
// key (a third of a snapshot's string decoding at 1M keys, node's BenchmarkStartup).
func (d *decoder) uvarintOf(what, suffix string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.mem) < binary.MaxVarintLen64 {
		_ = d.fill(binary.MaxVarintLen64) // fewer at the end: Uvarint then says what is missing
	}
	v, n := binary.Uvarint(d.mem)
	d.advance(what, suffix, n)
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	if len(d.mem) < binary.MaxVarintLen64 {
		_ = d.fill(binary.MaxVarintLen64)
	}
	v, n := binary.Varint(d.mem)
	d.advance(what, "", n)
	return v
}

// errVarintOverflow is binary.ReadUvarint's error for a varint longer than 64 bits, which
// binary.Uvarint reports as a negative length.
var errVarintOverflow = errors.New("binary: varint overflows a 64-bit integer")

// advance consumes the n bytes binary.Uvarint or Varint decoded from mem (n <= 0: too short,
// or an overflow), as binary.ReadUvarint's error would report them, for the field
// what+suffix.
func (d *decoder) advance(what, suffix string, n int) {
	switch {
	case n > 0:
		d.mem = d.mem[n:]
	case n == 0:
		d.eof(what+suffix, d.short())
	default:
		d.eof(what+suffix, errVarintOverflow)
	}
}

// left reports the bytes left to read, and false for a stream (unknown).
func (d *decoder) left() (int, bool) { return len(d.mem), d.src == nil }

func (d *decoder) u32(what string) uint32 {
	v := d.uvarint(what)
	if v > math.MaxUint32 {
		d.fail(fmt.Errorf("%w: %s %d overflows uint32", ErrBadCommand, what, v))
		return 0
	}
	return uint32(v)
}

func (d *decoder) full(what string, p []byte) {
	if d.err != nil {
		return
	}
	if len(d.mem) < len(p) {
		if err := d.fill(len(p)); err != nil {
			d.eof(what, err)
			return
		}
	}
	d.mem = d.mem[copy(p, d.mem):]
}

func (d *decoder) u64(what string) uint64 {
	var b [8]byte
	d.full(what, b[:])
	return binary.LittleEndian.Uint64(b[:])
}

func (d *decoder) txn(what string) TxnID {
	var t TxnID
	d.full(what, t[:])
	return t
}

func (d *decoder) str(what string) string { return d.strLike(what, "") }

// strLike reads a string like str, but returns like itself, allocating nothing, when the
// string read equals it: snapshots repeat owners and keys.
func (d *decoder) strLike(what, like string) string {
	n := d.uvarintOf(what, " length")
	if d.err != nil {
		return ""
	}
	limit := uint64(maxStreamField)
	if left, ok := d.left(); ok {
		limit = uint64(left)
	}
	if n > limit {
		d.fail(fmt.Errorf("%w: %s length %d exceeds %d remaining", ErrShortCommand, what, n, limit))
		return ""
	}
	if uint64(len(d.mem)) < n {
		if err := d.fill(int(n)); err != nil {
			d.eof(what, err)
			return ""
		}
	}
	p := d.mem[:n]
	d.mem = d.mem[n:]
	if string(p) == like {
		return like
	}
	return string(p)
}

// count reads a collection length. Each element takes at least minSize bytes,
// which bounds the count on commands; the returned capacity hint is capped so a
// corrupt stream cannot force a huge allocation.
func (d *decoder) count(what string, minSize int) (n, capHint int) {
	v := d.uvarint(what)
	if d.err != nil {
		return 0, 0
	}
	if left, ok := d.left(); ok && v > uint64(left/minSize) {
		d.fail(fmt.Errorf("%w: %s %d does not fit in %d bytes", ErrShortCommand, what, v, left))
		return 0, 0
	}
	if v > math.MaxInt32 {
		d.fail(fmt.Errorf("%w: %s %d too large", ErrBadCommand, what, v))
		return 0, 0
	}
	return int(v), min(int(v), 1<<16)
}

func (d *decoder) cmdEntry() Entry { return d.cmdEntryLike("") }

// cmdEntryLike is cmdEntry with the key read by strLike(key).
func (d *decoder) cmdEntryLike(key string) Entry {
	var x Entry
	x.Key = d.strLike("entry key", key)
	x.Extent.Bucket = d.u32("entry bucket")
	x.Extent.Offset = d.varint("entry offset")
	x.Extent.Length = d.varint("entry length")
	x.Size = d.u32("entry size")
	x.Sum = d.u64("entry sum")
	x.Gen = d.uvarint("entry gen")
	return x
}

// member reads a member record; an empty NodeID is malformed. withPeer: the record has
// a peer address (Member commands of memberVersion, snapshots of snapshotVersion).
func (d *decoder) member(withPeer bool) Member {
	m := Member{NodeID: d.str("member node"), RaftAddr: d.str("member raft addr"), APIAddr: d.str("member api addr")}
	if withPeer {
		m.PeerAddr = d.str("member peer addr")
	}
	if d.err == nil && m.NodeID == "" {
		d.fail(fmt.Errorf("%w: member node ID is empty", ErrBadCommand))
	}
	return m
}

func (d *decoder) fullEntry() Entry { return d.fullEntryLike("") }

// fullEntryLike is fullEntry with the key read by strLike(key): a result's entry is most
// often its outcome's key, which then is one string, not two.
func (d *decoder) fullEntryLike(key string) Entry {
	x := d.cmdEntryLike(key)
	x.Owner = d.strLike("entry owner", d.owner)
	d.owner = x.Owner
	x.TxnID = d.txn("entry txn")
	return x
}

// Minimum encoded sizes, for bounding counts.
const (
	minCmdEntry = 1 + 1 + 1 + 1 + 1 + 8 + 1
	minKeyGen   = 1 + 1
)

// Decode parses a command produced by EncodeCommit, EncodeAbort,
// EncodeRemove or EncodeSetMember. The value is a Commit, Abort, Remove or
// SetMember (not a pointer); a
// Commit's entries have Owner and TxnID filled from the command. Decode never
// panics: any malformed input is an error wrapping ErrShortCommand,
// ErrUnknownCommand or ErrBadCommand.
func Decode(data []byte) (CommandType, any, error) {
	if len(data) < 2 {
		return 0, nil, fmt.Errorf("%w: %d bytes, need type and version", ErrShortCommand, len(data))
	}
	t := CommandType(data[0])
	if t < CmdCommit || t > CmdCluster {
		return t, nil, fmt.Errorf("%w: %d", ErrUnknownCommand, data[0])
	}
	if v := data[1]; v != commandVersion && (t != CmdMember || v != memberVersion) {
		return t, nil, fmt.Errorf("%w: %s version %d, this binary reads version %d (and %d for members)", ErrBadCommand, t, v, commandVersion, memberVersion)
	}
	d := &decoder{mem: data[2:]}
	var v any
	switch t {
	case CmdCommit:
		v = d.commit()
	case CmdAbort:
		v = Abort{TxnID: d.txn("txn"), Node: d.str("node"), Reason: d.str("reason")}
	case CmdRemove:
		v = d.remove()
	case CmdMember:
		v = SetMember{TxnID: d.txn("txn"), Remove: d.bool1("remove"), Member: d.member(data[1] == memberVersion)}
	case CmdPrune:
		v = Prune{TxnID: d.txn("txn"), Before: d.uvarint("before")}
	case CmdCluster:
		c := SetCluster{TxnID: d.txn("txn"), ID: d.str("cluster id")}
		if d.err == nil && c.ID == "" {
			d.fail(fmt.Errorf("%w: cluster ID is empty", ErrBadCommand))
		}
		v = c
	}
	if d.err == nil && len(d.mem) != 0 {
		d.fail(fmt.Errorf("%w: %s has %d trailing bytes", ErrBadCommand, t, len(d.mem)))
	}
	if d.err != nil {
		return t, nil, d.err
	}
	return t, v, nil
}

func (d *decoder) commit() Commit {
	c := Commit{TxnID: d.txn("txn")}
	c.Node, c.Entries = d.entries()
	for i := range c.Entries {
		c.Entries[i].Owner, c.Entries[i].TxnID = c.Node, c.TxnID
	}
	return c
}

// entries reads what encoder.entries wrote.
func (d *decoder) entries() (string, []Entry) {
	node := d.str("node")
	n, hint := d.count("entry count", minCmdEntry)
	xs := make([]Entry, 0, hint)
	for i := 0; i < n && d.err == nil; i++ {
		xs = append(xs, d.cmdEntry())
	}
	return node, xs
}

func (d *decoder) remove() Remove {
	r := Remove{TxnID: d.txn("txn")}
	n, hint := d.count("key count", minKeyGen)
	r.Keys = make([]KeyGen, 0, hint)
	for i := 0; i < n && d.err == nil; i++ {
		r.Keys = append(r.Keys, KeyGen{Key: d.str("key"), Gen: d.uvarint("gen")})
	}
	r.Reason = d.str("reason")
	return r
}
