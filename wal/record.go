package wal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
)

// RecordType says what a Record means to the transaction coordinator.
// Its values are on-disk format: never renumber them.
type RecordType uint8

const (
	// RecordIntent is a transaction's intent; Payload is opaque to wal.
	RecordIntent RecordType = 1
	// RecordDone says the transaction is resolved; Payload is usually empty.
	RecordDone RecordType = 2
	// RecordDataFailed says the transaction's data could not be made durable (a failed
	// fdatasync): recovery must never roll it forward, even if its records read back (the
	// kernel may have dropped the pages a later fdatasync would claim to have written).
	RecordDataFailed RecordType = 3
)

// String implements fmt.Stringer.
func (t RecordType) String() string {
	switch t {
	case RecordIntent:
		return "intent"
	case RecordDataFailed:
		return "data-failed"
	case RecordDone:
		return "done"
	default:
		return fmt.Sprintf("RecordType(%d)", uint8(t))
	}
}

func (t RecordType) valid() bool {
	return t == RecordIntent || t == RecordDone || t == RecordDataFailed
}

// Record is one log entry.
type Record struct {
	Type    RecordType
	TxnID   [16]byte
	Payload []byte // nil when empty after a decode
}

// Envelope layout; these constants are on-disk format (see the package doc).
const (
	envMagic      = "KVW1"
	envVersion    = 1
	offVersion    = 4
	offType       = 5
	offTxnID      = 6
	offPayloadLen = 22
	envHeaderSize = 26 // magic 4 + version 1 + type 1 + txnID 16 + payloadLen 4
	envSumSize    = 8
	envOverhead   = envHeaderSize + envSumSize

	// maxPayload is the largest payload an envelope can describe.
	maxPayload = math.MaxUint32
)

// checkRecord reports why r cannot be encoded, wrapping ErrInvalidRecord.
func checkRecord(r Record) error {
	if !r.Type.valid() {
		return fmt.Errorf("%w: unknown type %d", ErrInvalidRecord, uint8(r.Type))
	}
	if uint64(len(r.Payload)) > maxPayload {
		return fmt.Errorf("%w: payload of %d bytes exceeds %d", ErrInvalidRecord, len(r.Payload), uint64(maxPayload))
	}
	return nil
}

// appendEnvelope appends the envelope of r to dst. r must pass checkRecord.
func appendEnvelope(dst []byte, r Record) []byte {
	start := len(dst)
	dst = append(dst, envMagic...)
	dst = append(dst, envVersion, byte(r.Type))
	dst = append(dst, r.TxnID[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Payload)))
	dst = append(dst, r.Payload...)
	return binary.LittleEndian.AppendUint64(dst, xxhash.Sum64(dst[start:]))
}

// encodeRecord returns the envelope of r, or an error wrapping ErrInvalidRecord.
func encodeRecord(r Record) ([]byte, error) {
	if err := checkRecord(r); err != nil {
		return nil, err
	}
	return appendEnvelope(make([]byte, 0, envOverhead+len(r.Payload)), r), nil
}

// decodeRecord verifies one envelope and returns its Record. The Payload
// aliases b. Any defect gives an error wrapping ErrInvalidRecord.
func decodeRecord(b []byte) (Record, error) {
	if len(b) < envOverhead {
		return Record{}, fmt.Errorf("%w: %d bytes is shorter than an envelope (%d)", ErrInvalidRecord, len(b), envOverhead)
	}
	if !bytes.Equal(b[:offVersion], []byte(envMagic)) {
		return Record{}, fmt.Errorf("%w: bad magic %q", ErrInvalidRecord, b[:offVersion])
	}
	if b[offVersion] != envVersion {
		return Record{}, fmt.Errorf("%w: unknown version %d", ErrInvalidRecord, b[offVersion])
	}
	n := binary.LittleEndian.Uint32(b[offPayloadLen:envHeaderSize])
	if uint64(n) != uint64(len(b)-envOverhead) {
		return Record{}, fmt.Errorf("%w: payload length %d does not match entry size %d", ErrInvalidRecord, n, len(b))
	}
	body := b[:len(b)-envSumSize]
	if got, want := xxhash.Sum64(body), binary.LittleEndian.Uint64(b[len(body):]); got != want {
		return Record{}, fmt.Errorf("%w: checksum %#016x, want %#016x", ErrInvalidRecord, got, want)
	}
	r := Record{Type: RecordType(b[offType])}
	if !r.Type.valid() {
		return Record{}, fmt.Errorf("%w: unknown type %d", ErrInvalidRecord, b[offType])
	}
	copy(r.TxnID[:], b[offTxnID:offPayloadLen])
	if n > 0 {
		r.Payload = b[envHeaderSize:len(body):len(body)]
	}
	return r, nil
}

// envelopeAt reports whether a complete, valid envelope starts at b[0],
// using the payload length it declares, and returns its size.
func envelopeAt(b []byte) (int, bool) {
	if len(b) < envOverhead || !bytes.HasPrefix(b, []byte(envMagic)) {
		return 0, false
	}
	size := uint64(binary.LittleEndian.Uint32(b[offPayloadLen:envHeaderSize])) + envOverhead
	if size > uint64(len(b)) {
		return 0, false
	}
	if _, err := decodeRecord(b[:size]); err != nil {
		return 0, false
	}
	return int(size), true
}
