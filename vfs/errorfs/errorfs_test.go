package errorfs

import (
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/kvoffload/kvoffload/vfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

func TestFailNth(t *testing.T) {
	inj := FailNth(OpSync, 3, syscall.EIO)
	var failed []int
	for i := 1; i <= 5; i++ {
		if err := inj(OpWrite, "f"); err != nil {
			t.Fatalf("other op kind failed: %v", err)
		}
		if err := inj(OpSync, "f"); err != nil {
			failed = append(failed, i)
		}
	}
	if len(failed) != 1 || failed[0] != 3 {
		t.Fatalf("failed syncs %v, want [3]", failed)
	}
}

func TestFailNthConcurrent(t *testing.T) {
	inj := FailNth(OpWrite, 50, syscall.EIO)
	var wg sync.WaitGroup
	var mu sync.Mutex
	fails := 0
	for range 100 {
		wg.Go(func() {
			if inj(OpWrite, "f") != nil {
				mu.Lock()
				fails++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if fails != 1 {
		t.Fatalf("%d failures, want exactly 1", fails)
	}
}

func TestOnNameAny(t *testing.T) {
	boom := errors.New("boom")
	inj := Any(
		OnName(func(n string) bool { return strings.HasSuffix(n, ".kvb") }, FailNth(OpSync, 1, boom)),
		FailNth(OpRemove, 2, syscall.ENOSPC),
	)
	if err := inj(OpSync, "LOCK"); err != nil {
		t.Fatalf("non-matching name failed: %v", err)
	}
	if err := inj(OpSync, "a.kvb"); !errors.Is(err, boom) {
		t.Fatalf("first matching sync: %v, want boom", err)
	}
	if err := inj(OpRemove, "x"); err != nil {
		t.Fatal(err)
	}
	if err := inj(OpRemove, "x"); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("second remove: %v, want ENOSPC", err)
	}
}

func TestInjectsEveryOp(t *testing.T) {
	boom := errors.New("boom")
	m := memfs.New()
	f, err := m.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for op := OpOpen; op <= OpPunch; op++ {
		e := Wrap(m, func(o Op, _ string) error {
			if o == op {
				return boom
			}
			return nil
		})
		if err := exerciseOps(e); !errors.Is(err, boom) {
			t.Errorf("%v: error %v, want boom", op, err)
		}
	}
}

// exerciseOps performs one operation of each kind and returns the first error.
func exerciseOps(fsys vfs.FS) error {
	f, err := fsys.OpenFile("/f", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	steps := []func() error{
		func() error { _, err := f.ReadAt(make([]byte, 1), 0); return err },
		func() error { _, err := f.WriteAt([]byte("y"), 0); return err },
		f.Sync,
		func() error { return fsys.SyncDir("/") },
		func() error { return f.Truncate(1) },
		func() error { return f.PunchHole(0, 1) },
		func() error { return fsys.Remove("/f") },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}
