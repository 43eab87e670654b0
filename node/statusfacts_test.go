package node

import (
	"context"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/client"
)

// Status names the answering member's build and its data space: the build line `storenode
// version` prints, the data filesystem's free bytes and the space reserve the bucket store
// keeps.
func TestStatusNamesBuildAndSpace(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.APIAddr = "127.0.0.1:0"
	cfg.SpaceReserve = 3 << 20
	n := mustOpen(t, cfg)
	defer mustClose(t, n)
	c, err := client.Dial(context.Background(), n.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Build != ReadBuild().String() || !strings.Contains(st.Build, "revision") {
		t.Errorf("Status build %q, want %q", st.Build, ReadBuild().String())
	}
	if st.FreeBytes <= 0 || st.ReserveBytes != cfg.SpaceReserve {
		t.Errorf("Status data space: %d free, reserve %d; want free > 0 and the reserve %d", st.FreeBytes, st.ReserveBytes, cfg.SpaceReserve)
	}
}
