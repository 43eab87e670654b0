//go:build chaos

package chaos

import (
	"fmt"
	"testing"

	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// TestTornRecordWrite: the child writes half of a bucket write (whole 4 KiB blocks: one record,
// or a run of a transaction's neighbouring records, bucketstore.WriteRecords) and dies in the
// middle of it, on the 1st, 4th and 9th write. Recovery must abort the transaction whose
// records are torn (their checksums cannot verify), collect the halves, and keep every
// acknowledged key; a clean run on the same directory follows.
func TestTornRecordWrite(t *testing.T) {
	for _, nth := range []int{1, 4, 9} {
		t.Run(fmt.Sprintf("write-%d", nth), func(t *testing.T) {
			h := newHarness(t, testkit.Seed(t))
			if !h.wait(h.start(fmt.Sprintf("%s=torn@%d", failpoint.BucketWrite, nth), 4)) {
				t.Fatalf("the child was not killed by the torn write #%d", nth)
			}
			h.verify()
			if h.wait(h.start("", 1)) {
				t.Fatal("clean run was killed")
			}
			h.verify()
		})
	}
}
