package txn

import (
	"testing"

	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
)

// fsm restates bucketstore's record format (it imports no I/O package); the two must agree,
// or the leader and the readers would call good records corrupt.
func TestFSMRecordFormatMatchesBucketstore(t *testing.T) {
	if fsm.ExtentAlignment != bucketstore.Alignment || fsm.MaxKeyLen != bucketstore.MaxKeyLen ||
		fsm.MaxPayloadLen != bucketstore.MaxPayloadLen || fsm.MaxRecordLength != bucketstore.MaxRecordLen {
		t.Fatalf("fsm format constants differ from bucketstore's")
	}
	for _, k := range []int{0, 1, 56, 1024} {
		for _, n := range []int{0, 1, 4040, 4041, 4096, 1 << 20, bucketstore.MaxPayloadLen} {
			if got, want := fsm.RecordLength(k, uint32(n)), bucketstore.RecordSize(k, n); got != want {
				t.Errorf("RecordLength(%d, %d) = %d, bucketstore.RecordSize %d", k, n, got, want)
			}
		}
	}
	cfg := DefaultConfig("n")
	if got, want := cfg.MaxRecordLen(), bucketstore.RecordSize(cfg.MaxKeyBytes, int(cfg.MaxObjectBytes)); got != want {
		t.Errorf("MaxRecordLen %d, want %d", got, want)
	}
	cfg.MaxObjectBytes = 2 << 30 // over what a record can hold
	if got := cfg.MaxRecordLen(); got != bucketstore.MaxRecordLen {
		t.Errorf("MaxRecordLen over the format's limit: %d, want %d", got, int64(bucketstore.MaxRecordLen))
	}
}
