package transport

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// The value-carrying messages, OffloadChunk (client to node) and GetChunk (node to client),
// skip a copy each way: a large value is sent from its own slice, after a head that holds the
// other fields, instead of being marshalled into a buffer first (the transport copies it into
// its frames in any case); and a received value is copied once, from the frames straight into
// its own slice, instead of gathered into one buffer and then copied again by proto.Unmarshal.
// The bytes on the wire are plain protobuf (fields in another order, which every decoder
// accepts: protobuf's encoding guide, "Field Order").

// zeroCopyBytes is the smallest value sent or received this way; a smaller message takes
// the general path.
const zeroCopyBytes = 32 << 10

// Field numbers of the values (api/kvoffload/v1/kvoffload.proto).
const (
	offloadDataField protowire.Number = 4
	getDataField     protowire.Number = 5
)

// splitValue returns, for a value-carrying message with a large value and no unknown fields,
// the message without its value and the value with its field number; ok is false otherwise.
func splitValue(m proto.Message) (head proto.Message, value []byte, field protowire.Number, ok bool) {
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		return nil, nil, 0, false
	}
	switch c := m.(type) {
	case *pb.OffloadChunk:
		if len(c.Data) >= zeroCopyBytes {
			return &pb.OffloadChunk{TxnId: c.TxnId, Key: c.Key, Size: c.Size}, c.Data, offloadDataField, true
		}
	case *pb.GetChunk:
		if len(c.Data) >= zeroCopyBytes {
			return &pb.GetChunk{Index: c.Index, Status: c.Status, Reason: c.Reason, Size: c.Size, Code: c.Code}, c.Data, getDataField, true
		}
	}
	return nil, nil, 0, false
}

// marshalSplit encodes head, then value as field: two buffers, the second value itself.
// grpc-go copies the second into HTTP/2 frames after SendMsg returns (its writer goroutine),
// so the value must not change until the call has ended: the Go client's BatchOffload and
// OffloadFrom return only after the server's answer or after the stream is reset, and a
// reset stream is never committed (its END_STREAM is never sent). store.go promises the
// caller its buffers back when the call returns; this is what keeps that promise.
func marshalSplit(head proto.Message, value []byte, field protowire.Number) (mem.BufferSlice, error) {
	b, err := proto.Marshal(head)
	if err != nil {
		return nil, err
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(value)))
	return mem.BufferSlice{mem.SliceBuffer(b), mem.SliceBuffer(value)}, nil
}

// unmarshalSplit decodes a large value-carrying message from data without gathering it first:
// the value's bytes are copied from data into their own slice, the other fields (a few bytes)
// into a small buffer that proto.Unmarshal decodes. ok is false (nothing decoded) when m is
// not such a message, data is small, or its encoding is anything unusual (the value field
// twice, a group, a truncation): the caller then decodes it the general way, which also
// reports any error.
func unmarshalSplit(data mem.BufferSlice, m proto.Message) (ok bool, err error) {
	var field protowire.Number
	var dst *[]byte
	switch c := m.(type) {
	case *pb.OffloadChunk:
		field, dst = offloadDataField, &c.Data
	case *pb.GetChunk:
		field, dst = getDataField, &c.Data
	default:
		return false, nil
	}
	if data.Len() < zeroCopyBytes {
		return false, nil
	}
	r := reader{bufs: data, n: data.Len()}
	var rest, value []byte
	found := false
	for !r.done() {
		start := len(rest)
		num, typ, ok := r.tag(&rest)
		if !ok {
			return false, nil
		}
		if num == field && typ == protowire.BytesType {
			n, ok := r.varint(nil)
			if !ok || found || n > uint64(r.left()) {
				return false, nil
			}
			rest = rest[:start] // the value's tag is not decoded again
			value = make([]byte, n)
			r.read(value)
			found = true
			continue
		}
		if !r.skip(typ, &rest) {
			return false, nil
		}
	}
	if err := proto.Unmarshal(rest, m); err != nil {
		return true, err
	}
	if found {
		*dst = value
	}
	return true, nil
}

// reader walks a BufferSlice's bytes in order.
type reader struct {
	bufs mem.BufferSlice
	i    int    // current buffer
	cur  []byte // what is left of it
	n    int    // bytes not read yet: kept, so left is O(1) (a message of many tiny fields in
	// many tiny frames must cost linear time, not fields x frames)
}

func (r *reader) fill() bool {
	for len(r.cur) == 0 {
		if r.i >= len(r.bufs) {
			return false
		}
		r.cur = r.bufs[r.i].ReadOnlyData()
		r.i++
	}
	return true
}

func (r *reader) done() bool { return !r.fill() }

// left is the number of bytes not read yet.
func (r *reader) left() int { return r.n }

// read fills dst (the caller checked that enough bytes are left).
func (r *reader) read(dst []byte) {
	for len(dst) > 0 && r.fill() {
		n := copy(dst, r.cur)
		dst, r.cur = dst[n:], r.cur[n:]
		r.n -= n
	}
}

// byte reads one byte, appending it to keep when keep is not nil.
func (r *reader) byte(keep *[]byte) (byte, bool) {
	if !r.fill() {
		return 0, false
	}
	b := r.cur[0]
	r.cur = r.cur[1:]
	r.n--
	if keep != nil {
		*keep = append(*keep, b)
	}
	return b, true
}

// varint reads a base-128 varint (at most 10 bytes, the last at most 1, as protowire.ConsumeVarint
// requires), appending its bytes to keep.
func (r *reader) varint(keep *[]byte) (uint64, bool) {
	var v uint64
	for i := 0; i < 10; i++ {
		b, ok := r.byte(keep)
		if !ok {
			return 0, false
		}
		if i == 9 && b > 1 {
			return 0, false // overflows 64 bits: protowire refuses it, and so must this
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return v, true
		}
	}
	return 0, false
}

func (r *reader) tag(keep *[]byte) (protowire.Number, protowire.Type, bool) {
	v, ok := r.varint(keep)
	if !ok {
		return 0, 0, false
	}
	num, typ := protowire.DecodeTag(v)
	return num, typ, num.IsValid()
}

// skip copies one field's value of wire type typ into keep; groups are refused.
func (r *reader) skip(typ protowire.Type, keep *[]byte) bool {
	var n uint64
	switch typ {
	case protowire.VarintType:
		_, ok := r.varint(keep)
		return ok
	case protowire.Fixed32Type:
		n = 4
	case protowire.Fixed64Type:
		n = 8
	case protowire.BytesType:
		var ok bool
		if n, ok = r.varint(keep); !ok {
			return false
		}
	default:
		return false
	}
	if n > uint64(r.left()) || n > 1<<20 { // the other fields are small: a key, a reason
		return false
	}
	at := len(*keep)
	*keep = append(*keep, make([]byte, n)...)
	r.read((*keep)[at:])
	return true
}
