package embedtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

const modulePath = "github.com/kvoffload/kvoffload"

// freshVersion is a pseudo-version no earlier run used. The embedder builds with the
// machine's module cache (its compiled packages are then reused), which keeps a version it
// once extracted and never reads the proxy for it again: one fixed version would build an
// old checkout.
func freshVersion(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "v0.0.0-" + time.Now().UTC().Format("20060102150405") + "-" + hex.EncodeToString(b)
}

// writeProxy lays out the module in root as a GOPROXY=file:// proxy serves it
// (https://go.dev/ref/mod#goproxy-protocol): @v/list and the version's .info, .mod and .zip.
func writeProxy(t *testing.T, root, moduleDir, version string) {
	t.Helper()
	dir := filepath.Join(root, filepath.FromSlash(modulePath), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(moduleDir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	m := module.Version{Path: modulePath, Version: version}
	files, err := checkoutFiles(moduleDir)
	if err != nil {
		t.Logf("no git file list (%v): zipping the whole directory", err)
		err = zip.CreateFromDir(&z, m, moduleDir)
	} else {
		err = zip.Create(&z, m, files)
	}
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  gomod,
		version + ".zip":  z.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("module zip: %d files, %d KiB", len(files), z.Len()>>10)
}

// checkoutFiles lists the files git tracks in dir, as they are in the work tree (edits not
// yet committed included, untracked files left out: a new file is zipped once it is added).
func checkoutFiles(dir string) ([]zip.File, error) {
	out, err := exec.Command("git", "-C", dir, "ls-files", "-z", "--cached").Output()
	if err != nil {
		return nil, err
	}
	var files []zip.File
	for _, rel := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		full := filepath.Join(dir, filepath.FromSlash(rel))
		info, err := os.Lstat(full)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet committed
		}
		if err != nil {
			return nil, err
		}
		files = append(files, diskFile{rel, full, info})
	}
	if len(files) == 0 {
		return nil, errors.New("git lists no files")
	}
	return files, nil
}

// diskFile is one file of the checkout as zip.Create reads it.
type diskFile struct {
	slashPath, path string
	info            fs.FileInfo
}

func (f diskFile) Path() string                 { return f.slashPath }
func (f diskFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.path) }

// removeFromModCache deletes what the go command extracted and cached for version (it is
// written with -modcacherw, so it can be removed), and the module's version list it cached,
// leaving the rest of the cache alone.
func removeFromModCache(t *testing.T, modCache, version string) {
	t.Helper()
	extracted := filepath.Join(modCache, filepath.FromSlash(modulePath)+"@"+version)
	if err := os.RemoveAll(extracted); err != nil {
		t.Error(err)
	}
	downloads := filepath.Join(modCache, "cache", "download", filepath.FromSlash(modulePath), "@v")
	cached, err := filepath.Glob(filepath.Join(downloads, version+".*"))
	if err != nil {
		t.Error(err)
	}
	for _, f := range append(cached, filepath.Join(downloads, "list")) {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Error(err)
		}
	}
	removeEmptyDirs(filepath.Dir(extracted), modCache)
	removeEmptyDirs(downloads, modCache)
}

// removeEmptyDirs removes dir and its parents below top while they are empty.
func removeEmptyDirs(dir, top string) {
	for dir != top && strings.HasPrefix(dir, top+string(filepath.Separator)) && os.Remove(dir) == nil {
		dir = filepath.Dir(dir)
	}
}
