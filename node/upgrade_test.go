package node

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// fixturePayload is trace.Payload as it was when the fixture was written (304a460): a ChaCha8
// stream seeded with trace.PayloadSeed. trace.Payload has changed since; the fixture's bytes
// have not.
func fixturePayload(seed uint64, key string, size int) []byte {
	buf := make([]byte, size)
	_, _ = rand.NewChaCha8(trace.PayloadSeed(seed, key)).Read(buf)
	return buf
}

// untar extracts the gzip'd tar archive at path into dir.
func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o750)
		case tar.TypeReg:
			var out *os.File
			if out, err = os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777); err == nil {
				_, err = io.Copy(out, tr)
				out.Close()
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpensDataDirectoryOfTheLastRelease opens testdata/datadir-304a460.tar.gz: a cluster
// member's data directory written by the last landed binary (304a460) — 20 keys of
// 4096+i bytes (fixturePayload seed 7), a snapshot after the 16th (snapshot version 2, MEMBER
// commands version 1, no peer address), fixture@03 removed, JSON INTENT bodies in its WAL, no
// CLUSTER_ID. This binary must serve every key with its bytes, record a cluster ID, and
// restart again (issue 8: "an existing data directory written by today's code opens and
// serves every key").
func TestOpensDataDirectoryOfTheLastRelease(t *testing.T) {
	dir := t.TempDir()
	untar(t, filepath.Join("testdata", "datadir-304a460.tar.gz"), dir)
	cfg := memberConfig(t, dir, "old1") // new addresses: the node moved, as after a re-deploy
	cfg.BucketSize = 1 << 20
	check := func(n *Node) {
		t.Helper()
		keys := make([]string, 20)
		for i := range keys {
			keys[i] = fmt.Sprintf("fixture@%02d", i)
		}
		res, err := n.BatchGet(context.Background(), keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			switch {
			case i == 3 && r.Status == kvoffload.NotFound:
			case i != 3 && r.Status == kvoffload.Found && bytes.Equal(r.Value, fixturePayload(7, keys[i], 4096+i)):
			default:
				t.Errorf("%s: %s %q (%d bytes)", keys[i], r.Status, r.Reason, len(r.Value))
			}
		}
	}
	n := mustOpen(t, cfg)
	check(n)
	testkit.Eventually(t, 10*time.Second, "a cluster ID recorded for the old cluster", func() bool {
		id, err := readClusterID(dir)
		return err == nil && id != "" && n.fsm.ClusterID() == id
	})
	mustClose(t, n)
	n = mustOpen(t, cfg)
	defer mustClose(t, n)
	check(n)
}
