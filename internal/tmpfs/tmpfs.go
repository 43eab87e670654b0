// Package tmpfs mounts a small tmpfs for a test that needs a real filesystem to fill (a full
// disk: ENOSPC from the kernel, statfs's free space), and skips the test where it cannot.
package tmpfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Mount mounts a tmpfs of size (mount's syntax: "32m") in a directory of t's, unmounted at
// cleanup, and returns its path. Without the right to mount (root), it skips t.
func Mount(t testing.TB, size string) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(mnt, 0o750); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("needs root to mount a tmpfs: %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}
