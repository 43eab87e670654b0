package bucketstore

import (
	"strings"
	"testing"
)

// An extent from metadata that no record can have is corrupt metadata: Read says ErrCorrupt
// (never a plain error, which callers would answer Unavailable forever) and allocates nothing
// of its length first.
func TestReadRefusesImpossibleExtents(t *testing.T) {
	s := mustOpen(t, memConfig(nil))
	w := mustPut(t, s, "k", 1, 5000)
	mustRead(t, s, w)
	huge := w.h
	huge.PayloadLen = MaxPayloadLen // a record this long could exist; the bucket is shorter
	for _, tc := range []struct {
		name string
		ext  Extent
		h    Header
		want string
	}{
		{"misaligned offset", Extent{Bucket: w.ext.Bucket, Offset: 100, Length: w.ext.Length}, w.h, "not aligned to 4096"},
		{"misaligned length", Extent{Bucket: w.ext.Bucket, Offset: 0, Length: w.ext.Length + 1}, w.h, "not aligned to 4096"},
		{"16 TiB", Extent{Bucket: w.ext.Bucket, Offset: 0, Length: 16 << 40}, w.h, "largest record, 1073745920 bytes"},
		{"length of another record", Extent{Bucket: w.ext.Bucket, Offset: 0, Length: w.ext.Length + Alignment}, w.h, "is 8192 bytes"},
		{"past the end of the file", Extent{Bucket: w.ext.Bucket, Offset: 0, Length: RecordSize(1, MaxPayloadLen)}, huge, "past the end of the file"},
	} {
		allocs := testing.AllocsPerRun(1, func() { _, _ = s.Read(tc.ext, tc.h) })
		_, err := s.Read(tc.ext, tc.h)
		if !IsCorrupt(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrCorrupt saying %q", tc.name, err, tc.want)
		}
		if allocs > 20 {
			t.Errorf("%s: %v allocations before refusing", tc.name, allocs)
		}
	}
	if MaxRecordLen != RecordSize(MaxKeyLen, MaxPayloadLen) {
		t.Fatalf("MaxRecordLen %d, RecordSize(MaxKeyLen, MaxPayloadLen) %d", int64(MaxRecordLen), RecordSize(MaxKeyLen, MaxPayloadLen))
	}
}
