package transport

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// codec is grpc-go's protobuf codec (google.golang.org/grpc encoding/proto/proto.go) with
// Pool in place of mem.DefaultBufferPool, which clears every buffer it hands out: a marshalled
// message of 256 KiB cleared 1 MiB first, and so did the contiguous copy of every received
// message (its 16 KiB frames gathered for proto.Unmarshal). Its name is "proto", so the
// content-subtype on the wire is the standard one and any peer understands it.
type codec struct{}

var _ encoding.CodecV2 = codec{}

// Name is "proto": the messages are plain protobuf.
func (codec) Name() string { return "proto" }

// Marshal encodes v, a protobuf message, into one buffer of Pool (a small message into a
// plain slice, as grpc-go's codec does; a large value is sent from its own slice, chunks.go).
func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("transport: cannot marshal %T: not a proto.Message", v)
	}
	if head, value, field, ok := splitValue(m); ok {
		return marshalSplit(head, value, field)
	}
	size := proto.Size(m)
	opt := proto.MarshalOptions{UseCachedSize: true} // safe: Size just ran on m
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opt.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := pool.Get(size)
	out, err := opt.MarshalAppend((*buf)[:0], m)
	if err == nil && len(out) != size {
		// The pool does not zero: a length other than Size would send stale bytes of another
		// message, or lose these.
		err = fmt.Errorf("transport: %T marshalled to %d bytes, Size said %d", m, len(out), size)
	}
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal decodes data into v, a protobuf message (a large value straight from the frames,
// chunks.go); the bytes fields of v are copies, so data's buffers may be reused once it returns.
func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("transport: cannot unmarshal into %T: not a proto.Message", v)
	}
	if ok, err := unmarshalSplit(data, m); ok {
		return err
	}
	buf := data.MaterializeToBuffer(pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
