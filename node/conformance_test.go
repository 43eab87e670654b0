package node

import (
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/storetest"
)

// TestConformance: the embedded node passes the Store conformance suite (a fresh node per
// test). The client against a real storenode serve runs it in cmd/storenode, the fake in fake/.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) kvoffload.Store {
		cfg := DefaultConfig(t.TempDir())
		cfg.BucketSize = 8 << 20
		n := mustOpen(t, cfg)
		t.Cleanup(func() { mustClose(t, n) })
		return n
	})
}
