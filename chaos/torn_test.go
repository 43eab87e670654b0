//go:build chaos

package chaos

import (
	"fmt"
	"testing"

	"github.com/kvoffload/kvoffload/internal/failpoint"
)

// TestTornRecordWrite: the child writes half of a record (whole 4 KiB blocks) and dies in the
// middle of the write, on the 1st, 9th and 30th record. Recovery must abort the transaction
// whose record is torn (its checksum cannot verify), collect the half record, and keep every
// acknowledged key; a clean run on the same directory follows.
func TestTornRecordWrite(t *testing.T) {
	for _, nth := range []int{1, 9, 30} {
		t.Run(fmt.Sprintf("record-%d", nth), func(t *testing.T) {
			h := newHarness(t, testSeed(t))
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
