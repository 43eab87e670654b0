package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fileSink is one file per block, made durable: LMCache's local-disk backend writes one
// file per KV chunk (lmcache/v1/storage_backend/local_disk_backend.py in LMCache/LMCache)
// without syncing; here each file is written, fsync'd and closed, and the directory is
// fsync'd once per batch (after the batch's last file), so a batch is on the disk, names
// included, when Put returns.
type fileSink struct{ dir string }

func openFileSink(dir string) (*fileSink, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("bench: file per block: %w", err)
	}
	return &fileSink{dir: dir}, nil
}

func (s *fileSink) Put(_ context.Context, pairs []Pair) (int, error) {
	for _, p := range pairs {
		path := filepath.Join(s.dir, strings.ReplaceAll(p.Key, "/", "_"))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
		if err != nil {
			return 0, fmt.Errorf("bench: file per block: %w", err)
		}
		_, err = f.Write(p.Value)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, fmt.Errorf("bench: file per block: %s: %w", path, err)
		}
	}
	d, err := os.Open(s.dir)
	if err != nil {
		return 0, fmt.Errorf("bench: file per block: %w", err)
	}
	defer d.Close()
	if err := unix.Fsync(int(d.Fd())); err != nil {
		return 0, fmt.Errorf("bench: file per block: fsync of the directory: %w", err)
	}
	return len(pairs), nil
}

func (s *fileSink) Close() error { return nil }

// BuildPebble builds the pebble driver of the separate module in moduleDir (bench/ in this
// repository: its own go.mod, so that the product's go.mod does not carry pebble) into
// outDir, with GOFLAGS=-mod=mod so that its dependencies resolve through the module proxy.
// It returns the binary's path.
func BuildPebble(ctx context.Context, moduleDir, outDir string) (string, error) {
	if _, err := os.Stat(filepath.Join(moduleDir, "go.mod")); err != nil {
		return "", fmt.Errorf("no pebble module: %w", err)
	}
	bin := filepath.Join(outDir, "kvoffload-bench-pebble")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./pebble")
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the pebble driver in %s: %w: %s", moduleDir, err, lastLine(string(out)))
	}
	return bin, nil
}

// runPebble runs the pebble driver on l in dir; it prints a Rate as JSON.
func runPebble(ctx context.Context, bin, dir string, l Load) (Rate, error) {
	cmd := exec.CommandContext(ctx, bin, "--dir", dir, "--keys", strconv.Itoa(l.Keys), "--value", strconv.Itoa(l.Value),
		"--writers", strconv.Itoa(l.Writers), "--batch", strconv.Itoa(l.Batch), "--seed", strconv.FormatUint(l.Seed, 10))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Rate{}, fmt.Errorf("pebble driver: %w: %s", err, lastLine(stderr.String()))
	}
	var r Rate
	if err := json.Unmarshal(out, &r); err != nil {
		return Rate{}, fmt.Errorf("pebble driver: its output %q: %w", lastLine(string(out)), err)
	}
	return r, nil
}
