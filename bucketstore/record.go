package bucketstore

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/kvoffload/kvoffload/extent"
	"github.com/kvoffload/kvoffload/internal/mutant"
	"github.com/kvoffload/kvoffload/vfs"
)

// These constants are on-disk format: changing any of them requires a new version.
const (
	// Alignment is the start and padding granularity of a record (format version 2): 512
	// bytes, the logical block size of the devices the store runs on, at which O_DIRECT reads
	// are allowed (open(2), "O_DIRECT"; measured on the development VMs with statx
	// STATX_DIOALIGN). A 4 KiB payload is then a 4.5 KiB record, not an 8 KiB one.
	Alignment = 512
	// WriteAlignment is the granularity of every write: a reservation (Reserve, or one run of
	// ReserveRun) starts at a multiple of it and is padded to one, so each pwrite covers whole
	// filesystem blocks (ext4 serializes O_DIRECT writes that are not block-aligned and
	// zeroes the rest of a partly written block) and records of different reservations never
	// share a block.
	WriteAlignment = 4096
	// legacyAlignment is the start and padding granularity of a version 1 record.
	legacyAlignment = 4096
	// MaxKeyLen bounds keys, so that a record's header and key fit in its first
	// WriteAlignment bytes.
	MaxKeyLen = 1024
	// MaxPayloadLen bounds payloads (the KV-cache blocks are at most 64 MiB).
	MaxPayloadLen = 1 << 30
	// MaxRecordLen is the largest extent a record can fill: a version 1 record of a
	// MaxKeyLen key and a MaxPayloadLen payload, 1 GiB + 4 KiB (a version 2 one is 1 GiB +
	// 1.5 KiB). Read refuses a longer extent as corrupt before allocating anything, so a
	// metadata entry with a huge length cannot exhaust memory.
	MaxRecordLen = (headerLen + MaxKeyLen + MaxPayloadLen + legacyAlignment - 1) &^ (legacyAlignment - 1)

	recordVersion   = 2 // written; Alignment padding
	legacyVersion   = 1 // still read; legacyAlignment padding
	headerLen       = 56
	headerSumOffset = 48
)

// Records are read with direct I/O, so Alignment must be a multiple of 512 (the smallest
// logical block size) and WriteAlignment of vfs.DirectIOAlignment: these array indexes fail
// to compile otherwise.
var (
	_ = [1]struct{}{}[Alignment%512]
	_ = [1]struct{}{}[WriteAlignment%vfs.DirectIOAlignment]
	_ = [1]struct{}{}[WriteAlignment%Alignment]
)

var recordMagic = [4]byte{'K', 'V', 'B', '1'}

// Header describes one record. PayloadLen and PayloadSum must match the payload exactly;
// NewHeader fills them in.
type Header struct {
	Key        string
	TxnID      [16]byte
	Generation uint64
	PayloadLen uint32
	PayloadSum uint64 // xxhash64 of the payload
}

// NewHeader returns the header of a record holding payload.
func NewHeader(key string, txnID [16]byte, generation uint64, payload []byte) Header {
	return Header{
		Key: key, TxnID: txnID, Generation: generation,
		PayloadLen: uint32(len(payload)), PayloadSum: xxhash.Sum64(payload),
	}
}

// Extent locates one record: its bucket, offset and padded length (RecordSize). It is the
// store's one extent type (package extent), which the metadata records as fsm.Extent.
type Extent = extent.Extent

// RecordSize returns the padded on-disk size of a record, a multiple of Alignment: the
// Length of its extent.
func RecordSize(keyLen, payloadLen int) int64 {
	return alignUp(int64(headerLen+keyLen+payloadLen), Alignment)
}

// legacyRecordSize is the size of a version 1 record, a multiple of legacyAlignment: the
// Length of its extent in data written before version 2.
func legacyRecordSize(keyLen, payloadLen int) int64 {
	return alignUp(int64(headerLen+keyLen+payloadLen), legacyAlignment)
}

// sizeOf returns the size of the record h describes, by its version.
func sizeOf(h Header, version byte) int64 {
	if version == legacyVersion {
		return legacyRecordSize(len(h.Key), int(h.PayloadLen))
	}
	return RecordSize(len(h.Key), int(h.PayloadLen))
}

// alignUp rounds n up to a multiple of a, a power of two.
func alignUp(n, a int64) int64 { return (n + a - 1) &^ (a - 1) }

// EncodeRecord writes the record into buf, whose length must be RecordSize(len(h.Key),
// len(payload)). It verifies h.PayloadLen and h.PayloadSum against payload first, so that a
// payload changed after hashing is never written.
func EncodeRecord(buf []byte, h Header, payload []byte) error {
	if err := checkEncodable(buf, h, payload); err != nil {
		return err
	}
	copy(buf[0:4], recordMagic[:])
	buf[4] = recordVersion
	buf[5] = 0
	binary.LittleEndian.PutUint16(buf[6:8], uint16(len(h.Key)))
	binary.LittleEndian.PutUint32(buf[8:12], h.PayloadLen)
	binary.LittleEndian.PutUint32(buf[12:16], 0)
	copy(buf[16:32], h.TxnID[:])
	binary.LittleEndian.PutUint64(buf[32:40], h.Generation)
	binary.LittleEndian.PutUint64(buf[40:48], h.PayloadSum)
	n := copy(buf[headerLen:], h.Key)
	n += copy(buf[headerLen+n:], payload)
	clear(buf[headerLen+n:])
	binary.LittleEndian.PutUint64(buf[headerSumOffset:headerLen], headerSum(buf, len(h.Key)))
	return nil
}

func checkEncodable(buf []byte, h Header, payload []byte) error {
	switch {
	case len(h.Key) > MaxKeyLen:
		return fmt.Errorf("bucketstore: key length %d > %d", len(h.Key), MaxKeyLen)
	case len(payload) > MaxPayloadLen:
		return fmt.Errorf("bucketstore: payload length %d > %d", len(payload), MaxPayloadLen)
	case int64(len(buf)) != RecordSize(len(h.Key), len(payload)):
		return fmt.Errorf("bucketstore: buffer length %d, record needs %d",
			len(buf), RecordSize(len(h.Key), len(payload)))
	case int(h.PayloadLen) != len(payload):
		return fmt.Errorf("bucketstore: header payload length %d, payload has %d",
			h.PayloadLen, len(payload))
	case h.PayloadSum != xxhash.Sum64(payload):
		return fmt.Errorf("bucketstore: header payload checksum %#x does not match payload", h.PayloadSum)
	}
	return nil
}

// headerSum is xxhash64 of bytes [0,48) followed by the key.
func headerSum(buf []byte, keyLen int) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.Write(buf[:headerSumOffset])
	_, _ = d.Write(buf[headerLen : headerLen+keyLen])
	return d.Sum64()
}

// DecodeRecord parses buf, which must hold exactly one record (len(buf) == its size: RecordSize
// for a version 2 record, legacyRecordSize for a version 1 one), and verifies magic, version, flags, reserved bytes, header checksum, lengths, payload
// checksum and zero padding. The returned payload aliases buf. Errors wrap ErrCorrupt.
func DecodeRecord(buf []byte) (Header, []byte, error) {
	h, err := decodeHeader(buf)
	if err != nil {
		return Header{}, nil, err
	}
	size := sizeOf(h, buf[4])
	if int64(len(buf)) != size {
		return Header{}, nil, corruptf("record size %d, buffer holds %d", size, len(buf))
	}
	start := headerLen + len(h.Key)
	payload := buf[start : start+int(h.PayloadLen)]
	if sum := xxhash.Sum64(payload); sum != h.PayloadSum && !mutant.On(mutant.SkipReadVerify) { // mutation test only
		return Header{}, nil, corruptf("payload checksum %#x, header says %#x", sum, h.PayloadSum)
	}
	if pad := buf[start+len(payload):]; !allZero(pad) {
		return Header{}, nil, corruptf("non-zero padding")
	}
	return h, payload, nil
}

// decodeHeader verifies and parses the fixed header and key of a version 1 or 2 record,
// which always lie in its first WriteAlignment bytes. buf may be longer than the header.
func decodeHeader(buf []byte) (Header, error) {
	if len(buf) < headerLen {
		return Header{}, corruptf("%d bytes, header needs %d", len(buf), headerLen)
	}
	if !bytes.Equal(buf[0:4], recordMagic[:]) {
		return Header{}, corruptf("bad magic %q", buf[0:4])
	}
	if (buf[4] != recordVersion && buf[4] != legacyVersion) || buf[5] != 0 {
		return Header{}, corruptf("unknown version %d flags %d", buf[4], buf[5])
	}
	keyLen := int(binary.LittleEndian.Uint16(buf[6:8]))
	payloadLen := binary.LittleEndian.Uint32(buf[8:12])
	if keyLen > MaxKeyLen || payloadLen > MaxPayloadLen || len(buf) < headerLen+keyLen {
		return Header{}, corruptf("implausible key length %d or payload length %d", keyLen, payloadLen)
	}
	if binary.LittleEndian.Uint32(buf[12:16]) != 0 {
		return Header{}, corruptf("non-zero reserved field")
	}
	if want, got := binary.LittleEndian.Uint64(buf[headerSumOffset:headerLen]), headerSum(buf, keyLen); want != got {
		return Header{}, corruptf("header checksum %#x, stored %#x", got, want)
	}
	h := Header{
		Key:        string(buf[headerLen : headerLen+keyLen]),
		Generation: binary.LittleEndian.Uint64(buf[32:40]),
		PayloadLen: payloadLen,
		PayloadSum: binary.LittleEndian.Uint64(buf[40:48]),
	}
	copy(h.TxnID[:], buf[16:32])
	return h, nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
