package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readNodeIDFile returns what dir's NODE_ID holds, "" if there is none.
func readNodeIDFile(t *testing.T, dir string) string {
	t.Helper()
	id, err := readIDFile(dir, nodeIDFile, "node ID")
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// openWrongID opens cfg under id and returns Open's error, which must come at once.
func openWrongID(t *testing.T, cfg Config, id string) error {
	t.Helper()
	cfg.ID, cfg.Txn.NodeID = id, id
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	n, err := Open(ctx, cfg)
	if err == nil {
		_ = n.Close()
		t.Fatalf("Open under --id %s of %s's data directory succeeded", id, cfg.ID)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the refusal took %v, want it at once", d)
	}
	return err
}

// TestWrongNodeIDRefused: a member's data directory opened under another ID is refused at
// once, with an error naming both IDs and the --id flag (not the removal advice that throws
// the data away); the directory is untouched and opens again under its own ID.
func TestWrongNodeIDRefused(t *testing.T) {
	cfg := memberConfig(t, filepath.Join(t.TempDir(), "n1"), "n1")
	n := mustOpen(t, cfg)
	mustOffload(t, n, objects(1, 4<<10, keysN("id", 4)...))
	mustClose(t, n)
	if got := readNodeIDFile(t, cfg.DataDir); got != "n1" {
		t.Fatalf("NODE_ID holds %q, want n1", got)
	}
	err := openWrongID(t, cfg, "n9")
	if !errors.Is(err, ErrNodeIDMismatch) || errors.Is(err, ErrRemoved) {
		t.Fatalf("Open under n9: %v, want ErrNodeIDMismatch", err)
	}
	for _, want := range []string{"belongs to node n1", "not --id n9", "--id n1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	n = mustOpen(t, cfg)
	defer n.Close()
	checkReadable(t, n, 1, 4<<10, keysN("id", 4)...)
}

// TestNodeIDAdopted: a data directory from before NODE_ID (an embedded node's too) records
// the ID of its first successful start, and refuses another from then on.
func TestNodeIDAdopted(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		cfg := testConfig(filepath.Join(t.TempDir(), "d"))
		if cluster {
			cfg = memberConfig(t, filepath.Join(t.TempDir(), "n1"), "n1")
		}
		mustClose(t, mustOpen(t, cfg))
		if err := os.Remove(filepath.Join(cfg.DataDir, nodeIDFile)); err != nil {
			t.Fatal(err) // recorded at the first open: the directory was fresh
		}
		mustClose(t, mustOpen(t, cfg))
		if got := readNodeIDFile(t, cfg.DataDir); got != cfg.ID {
			t.Fatalf("cluster=%v: NODE_ID holds %q after a start as %s", cluster, got, cfg.ID)
		}
		if err := openWrongID(t, cfg, "other"); !errors.Is(err, ErrNodeIDMismatch) {
			t.Fatalf("cluster=%v: Open under another ID: %v, want ErrNodeIDMismatch", cluster, err)
		}
	}
}

// TestIDFilesNotRewritten: a restart that changes no ID writes neither ID file (the same
// files stay, so a restart on a full disk does not fail on them), and a temporary file left
// by an unfinished write is removed at start.
func TestIDFilesNotRewritten(t *testing.T) {
	cfg := memberConfig(t, filepath.Join(t.TempDir(), "n1"), "n1")
	mustClose(t, mustOpen(t, cfg))
	before := map[string]os.FileInfo{}
	for _, name := range []string{clusterIDFile, nodeIDFile} {
		fi, err := os.Stat(filepath.Join(cfg.DataDir, name))
		if err != nil {
			t.Fatal(err)
		}
		before[name] = fi
	}
	stale := filepath.Join(cfg.DataDir, clusterIDFile+".tmp")
	if err := os.WriteFile(stale, nil, 0o640); err != nil { // what a full disk left
		t.Fatal(err)
	}
	n := mustOpen(t, cfg)
	defer n.Close()
	for name, fi := range before {
		now, err := os.Stat(filepath.Join(cfg.DataDir, name))
		if err != nil || !os.SameFile(fi, now) {
			t.Errorf("%s was written again at a restart that changed nothing (%v)", name, err)
		}
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unfinished write %s is still there after a start: %v", stale, err)
	}
}
