package cluster

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// A data directory's node ID: recorded when it has no Raft state, refused when another ID
// opens it, left unrecorded (for RecordNodeID) when it has state but no file.
func TestCheckNodeID(t *testing.T) {
	dir := t.TempDir()
	if recorded, err := CheckNodeID(dir, "n1", true); err != nil || !recorded {
		t.Fatalf("fresh directory: recorded %v, %v", recorded, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, nodeIDFile)); err != nil || string(b) != "n1\n" {
		t.Fatalf("%s holds %q (%v), want one line n1", nodeIDFile, b, err)
	}
	if _, err := CheckNodeID(dir, "n2", false); !errors.Is(err, ErrNodeIDMismatch) {
		t.Fatalf("another ID: %v, want ErrNodeIDMismatch", err)
	}
	old := t.TempDir()
	if recorded, err := CheckNodeID(old, "n1", false); err != nil || recorded {
		t.Fatalf("directory with state but no file: recorded %v, %v", recorded, err)
	}
	if err := RecordNodeID(old, "n1"); err != nil {
		t.Fatal(err)
	}
	if recorded, err := CheckNodeID(old, "n1", false); err != nil || !recorded {
		t.Fatalf("after RecordNodeID: recorded %v, %v", recorded, err)
	}
}

// An ID file that is empty or too long is refused; an unfinished write (NAME.tmp) is never
// read, and RemoveUnfinishedIDWrites removes it.
func TestIDFileChecks(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []string{"", "\n", string(make([]byte, 256))} {
		if err := os.WriteFile(filepath.Join(dir, clusterIDFile), []byte(bad), 0o640); err != nil {
			t.Fatal(err)
		}
		if _, err := readClusterID(dir); err == nil {
			t.Errorf("a %s of %d bytes was read", clusterIDFile, len(bad))
		}
	}
	dir = t.TempDir()
	tmp := filepath.Join(dir, clusterIDFile+".tmp")
	if err := os.WriteFile(tmp, []byte("kv-x\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if id, err := readClusterID(dir); err != nil || id != "" {
		t.Fatalf("an unfinished write was read: %q, %v", id, err)
	}
	RemoveUnfinishedIDWrites(dir, slog.New(slog.DiscardHandler))
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s left: %v", tmp, err)
	}
}

// CheckJoinAddrs refuses an address without a host or a port.
func TestCheckJoinAddrs(t *testing.T) {
	if err := CheckJoinAddrs([]string{"10.0.0.1:7001", "n2.example:7001"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"10.0.0.1", ":7001", "n2.example:"} {
		if CheckJoinAddrs([]string{bad}) == nil {
			t.Errorf("--join %q accepted", bad)
		}
	}
}
