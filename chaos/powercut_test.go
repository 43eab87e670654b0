//go:build chaos

package chaos

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// The power-loss tier (docs/chaos.md, TestPowerCutExt4): the child's whole data directory (WAL, buckets,
// Raft) lives on an ext4 file system in a loop-mounted image. At a random moment the harness
// shuts the file system down with EXT4_IOC_SHUTDOWN and EXT4_GOING_FLAGS_NOLOGFLUSH: from then
// on every I/O fails, and neither the journal nor dirty data is written back, so the disk
// keeps only what was durable (fsynced, or written back by chance) at the cut, as after a
// power loss. Then SIGKILL, unmount, mount again (the journal replays), recover and check.
const (
	ext4IocShutdown     = 0x8004587d // EXT4_IOC_SHUTDOWN, _IOR('X', 125, __u32)
	ext4GoingNoLogFlush = 2          // EXT4_GOING_FLAGS_NOLOGFLUSH
	imageSize           = 1 << 30    // sparse; a child writes at most 4 x 16 x 8 MiB
	powercutCycles      = 16
	powercutBatches     = 16                                              // per writer and child
	powercutKeys        = powercutBatches * childWriters * childBatchKeys // a child's workload
)

// ext4Image is an image file on the normal disk, loop-mounted at mnt.
type ext4Image struct {
	t       *testing.T
	file    string
	mnt     string
	mounted bool
}

// powercutSupport reports why the tier cannot run here, or nil.
func powercutSupport() error {
	if os.Geteuid() != 0 {
		return errors.New("not running as root")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return err
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			return err
		}
	}
	return nil
}

// newImage formats and mounts a fresh image, or skips the test if that is impossible here.
// A cleanup unmounts it and detaches its loop device even if the test fails.
func newImage(t *testing.T) *ext4Image {
	t.Helper()
	if err := powercutSupport(); err != nil {
		t.Skipf("power-loss tier needs root and a loop device: %v", err)
	}
	base := t.TempDir()
	im := &ext4Image{t: t, file: filepath.Join(base, "ext4.img"), mnt: filepath.Join(base, "mnt")}
	if err := os.Mkdir(im.mnt, 0o750); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(im.release)
	if err := im.format(); err != nil {
		t.Skipf("power-loss tier needs root and a loop device: %v", err)
	}
	if err := im.mount(); err != nil {
		t.Skipf("power-loss tier needs root and a loop device: %v", err)
	}
	return im
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// format replaces the image with an empty ext4 file system (unmounted).
func (im *ext4Image) format() error {
	if err := os.Remove(im.file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.Create(im.file)
	if err != nil {
		return err
	}
	err = errors.Join(f.Truncate(imageSize), f.Close())
	if err != nil {
		return err
	}
	return run("mkfs.ext4", "-q", "-F", im.file)
}

func (im *ext4Image) mount() error {
	if err := run("mount", "-o", "loop", im.file, im.mnt); err != nil {
		return err
	}
	im.mounted = true
	return nil
}

func (im *ext4Image) umount() error {
	if err := run("umount", im.mnt); err != nil {
		return err
	}
	im.mounted = false
	return nil
}

// remount unmounts and mounts the image again; mounting replays the ext4 journal.
func (im *ext4Image) remount() {
	im.t.Helper()
	if err := im.umount(); err != nil {
		im.t.Fatal(err)
	}
	if err := im.mount(); err != nil {
		im.t.Fatalf("mount after the power cut: %v", err)
	}
}

// refresh unmounts the image if needed, formats it and mounts it.
func (im *ext4Image) refresh() {
	im.t.Helper()
	if im.mounted {
		if err := im.umount(); err != nil {
			im.t.Fatal(err)
		}
	}
	if err := im.format(); err != nil {
		im.t.Fatal(err)
	}
	if err := im.mount(); err != nil {
		im.t.Fatal(err)
	}
}

// cut is the power loss: the file system stops accepting I/O and drops its journal and
// dirty pages.
func (im *ext4Image) cut() error {
	fd, err := unix.Open(im.mnt, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return os.NewSyscallError("EXT4_IOC_SHUTDOWN", unix.IoctlSetPointerInt(fd, ext4IocShutdown, ext4GoingNoLogFlush))
}

// release unmounts (lazily if busy) and detaches any loop device still backing the image.
func (im *ext4Image) release() {
	if im.mounted {
		if err := im.umount(); err != nil {
			im.t.Logf("cleanup: %v; detaching lazily", err)
			if err := run("umount", "-l", im.mnt); err != nil {
				im.t.Errorf("cleanup: %v", err)
			}
		}
		im.mounted = false
	}
	out, err := exec.Command("losetup", "-j", im.file).Output()
	if err != nil {
		im.t.Errorf("cleanup: losetup -j: %v", err)
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if dev, _, ok := strings.Cut(line, ":"); ok {
			if err := run("losetup", "-d", dev); err != nil {
				im.t.Errorf("cleanup: %v", err)
			}
		}
	}
}

// TestPowerCutExt4 is F7 on a real file system: a child offloads into a data directory on a
// loop-mounted ext4 image, the harness cuts the power at a random moment, SIGKILLs the
// child, remounts (journal replay) and recovers in process. Every acknowledged key (the ack
// file lives on the normal disk: it is the client's view) must read back byte-identical,
// nothing else may be visible, nothing orphaned, no intent left open (I1 I2 I3 I4 I5 I12).
// Cycles alternate a fresh image, cut when the child has acknowledged a random number of
// keys (1 to half its workload), and a second cut on the image the previous cycle
// recovered, 0-1500 ms after the child started, so it often lands in start-up or recovery.
// The moment is measured in acknowledgements, not in time, where it must fall in the
// workload: a fast disk would otherwise finish the workload before the cut.
func TestPowerCutExt4(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	im := newImage(t)
	var child *exec.Cmd
	t.Cleanup(func() {
		if child != nil && child.ProcessState == nil {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})
	var h *harness
	var early int
	for cycle := range powercutCycles {
		if cycle%2 == 0 {
			if cycle > 0 {
				im.refresh()
			}
			h = newHarnessAt(t, seed, filepath.Join(im.mnt, "data"))
		}
		delay, target := time.Duration(rng.IntN(1500))*time.Millisecond, powercutKeys/2
		if cycle%2 == 0 {
			delay, target = time.Hour, 1+rng.IntN(powercutKeys/2)
		}
		child = h.start("", powercutBatches)
		started := time.Now()
		acked := h.awaitProgress(started, delay, target)
		if err := im.cut(); err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		_ = child.Process.Signal(syscall.SIGKILL)
		if !waitCut(t, child) {
			early++
		}
		totals.crashes++
		im.remount()
		t.Logf("cycle %d: power cut %v after the start, %d keys acknowledged (cut at %v or %d keys)",
			cycle, time.Since(started).Round(time.Millisecond), acked, delay, target)
		h.verify()
	}
	if early > 0 {
		t.Errorf("the child had finished its workload before %d of %d power cuts", early, powercutCycles)
	}
}

// awaitProgress polls until delay has passed since started or the child has acknowledged
// target keys in this run, whichever comes first, and returns the keys acknowledged.
func (h *harness) awaitProgress(started time.Time, delay time.Duration, target int) int {
	h.t.Helper()
	before := len(h.acked())
	for {
		n := len(h.acked()) - before
		if n >= target || time.Since(started) >= delay {
			return n
		}
		if time.Since(started) > time.Minute {
			h.t.Fatalf("the child acknowledged %d keys within a minute, want %d", n, target)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitCut reaps the child after a power cut and reports whether it was still running: a
// child that saw the file system fail first may have exited on its own, which is fine.
func waitCut(t *testing.T, cmd *exec.Cmd) (running bool) {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true
		}
		t.Logf("the child exited on its own after the cut: %v", err)
		return true
	}
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	t.Log("the child had finished its workload before the cut")
	return false
}
