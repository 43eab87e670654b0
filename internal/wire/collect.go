package wire

import (
	"errors"
	"fmt"
	"io"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// ErrStreamEnded is Collect's error when the stream ends before every key was answered: the
// reply is incomplete and the call may be retried.
var ErrStreamEnded = errors.New("wire: stream ended early")

// maxPrealloc bounds the buffer allocated up front for an announced value size (a larger
// announcement grows the buffer as bytes arrive, so an announced size costs no memory until
// the data comes).
const maxPrealloc = 8 << 20

// Collect reassembles a GetChunk stream (BatchGet, or a forwarded owner read) for keys. The
// first chunk of each key carries its index and status (and size when Found); data chunks
// follow. A value whose byte count differs from the announced size is reported Unavailable,
// never returned truncated; a value announced over maxSize bytes is ErrProtocol.
//
// With bufs (len(bufs) == len(keys)) each Found value is assembled in bufs[i] (Value is
// bufs[i][:Size]) and a value longer than its buffer is ShortBuffer; without (nil) each
// value is a fresh slice. Collect returns ErrStreamEnded if the stream ends before every key
// was answered, kvoffload.ErrProtocol if chunks arrive out of order, and recv's error
// otherwise.
func Collect(recv func() (*pb.GetChunk, error), keys []string, bufs [][]byte, maxSize uint64) ([]kvoffload.GetResult, error) {
	a := assembler{res: make([]kvoffload.GetResult, len(keys)), seen: make([]bool, len(keys)), cur: -1, bufs: bufs, max: maxSize}
	for i, k := range keys {
		a.res[i].Key = k
	}
	for {
		ch, err := recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := a.add(ch); err != nil {
			return nil, err
		}
	}
	a.finish()
	for i, ok := range a.seen {
		if !ok {
			return nil, fmt.Errorf("%w: no result for key %d (%q) of %d", ErrStreamEnded, i, keys[i], len(keys))
		}
	}
	return a.res, nil
}

// assembler holds the reassembly state of one GetChunk stream.
type assembler struct {
	res  []kvoffload.GetResult
	seen []bool
	bufs [][]byte // caller-owned buffers, or nil
	max  uint64   // the largest size a Found key may announce
	cur  int      // index of the key receiving data; -1 before the first
	buf  []byte   // the current Found key's bytes so far
	want uint64   // the current Found key's announced size
	bad  string   // why the current key is no longer Found ("" while it is)
}

func (a *assembler) add(ch *pb.GetChunk) error {
	if ch.GetStatus() == pb.GetStatus_GET_STATUS_UNSPECIFIED {
		return a.data(ch)
	}
	a.finish()
	i := int(ch.GetIndex())
	if i >= len(a.res) || a.seen[i] {
		return fmt.Errorf("%w: chunk for key index %d (%d keys, seen before: %v)", kvoffload.ErrProtocol, i, len(a.res), i < len(a.res))
	}
	a.seen[i], a.cur = true, i
	r := &a.res[i]
	st, known := StatusFromPB(ch.GetStatus())
	r.Status, r.Code, r.Reason = st, CodeFromPB(ch.GetCode()), ch.GetReason()
	if !known {
		r.Code, r.Reason = kvoffload.CodeInternal, fmt.Sprintf("unknown status %d from the member: %s", ch.GetStatus(), ch.GetReason())
	}
	if r.Status != kvoffload.Found {
		if r.Code == kvoffload.CodeNone {
			r.Code = kvoffload.CodeUnavailable // a member that predates codes
		}
		if len(ch.GetData()) > 0 {
			return fmt.Errorf("%w: data for key %d whose status is %s", kvoffload.ErrProtocol, i, r.Status)
		}
		return nil
	}
	r.Code = kvoffload.CodeNone // Found: whatever the member sent
	a.want = ch.GetSize()
	if a.want > a.max {
		return fmt.Errorf("%w: %d bytes announced for key %d, over the largest value of %d", kvoffload.ErrProtocol, a.want, i, a.max)
	}
	r.Size = int(a.want)
	switch {
	case a.bufs == nil && a.want > 0 && a.want == uint64(len(ch.GetData())):
		// The whole value in its first chunk: the chunk's own bytes, freshly unmarshalled,
		// are the value (no copy).
		a.buf = ch.GetData()
		return nil
	case a.bufs == nil:
		a.buf = make([]byte, 0, min(a.want, maxPrealloc))
	case uint64(len(a.bufs[i])) < a.want:
		*r = kvoffload.GetResult{Key: r.Key, Status: kvoffload.ShortBuffer, Size: int(a.want), Code: kvoffload.ShortBuffer.Code(),
			Reason: fmt.Sprintf("buffer of %d bytes for a value of %d bytes", len(a.bufs[i]), a.want)}
		a.bad = r.Reason
		return nil
	default:
		a.buf = a.bufs[i][:0]
	}
	return a.data(ch)
}

// data appends a chunk's bytes to the current key.
func (a *assembler) data(ch *pb.GetChunk) error {
	// Data chunks belong to the current key; their index may be left unset (0).
	if a.cur < 0 || (ch.GetIndex() != 0 && int(ch.GetIndex()) != a.cur) {
		return fmt.Errorf("%w: data chunk for key index %d while reading %d", kvoffload.ErrProtocol, ch.GetIndex(), a.cur)
	}
	if a.res[a.cur].Status != kvoffload.Found {
		if len(ch.GetData()) > 0 && a.bad == "" {
			return fmt.Errorf("%w: data for key %d whose status is %s", kvoffload.ErrProtocol, a.cur, a.res[a.cur].Status)
		}
		return nil // the rest of a value already reported Unavailable or ShortBuffer
	}
	if uint64(len(a.buf))+uint64(len(ch.GetData())) > a.want {
		a.fail(fmt.Sprintf("value longer than the announced %d bytes", a.want))
		return nil
	}
	a.buf = append(a.buf, ch.GetData()...)
	return nil
}

// finish closes the current key: a Found value must hold exactly the announced bytes.
func (a *assembler) finish() {
	if a.cur < 0 {
		return
	}
	if r := &a.res[a.cur]; r.Status == kvoffload.Found {
		if uint64(len(a.buf)) == a.want {
			r.Value = a.buf
		} else {
			a.fail(fmt.Sprintf("value truncated: got %d of %d bytes", len(a.buf), a.want))
		}
	}
	a.cur, a.buf, a.want, a.bad = -1, nil, 0, ""
}

// fail reports the current key Unavailable because its bytes did not add up.
func (a *assembler) fail(why string) {
	r := &a.res[a.cur]
	r.Status, r.Value, r.Size, r.Code, r.Reason = kvoffload.Unavailable, nil, 0, kvoffload.Unavailable.Code(), why
	a.buf, a.bad = nil, why
}
