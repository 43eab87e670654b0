package embedtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

const forkPath = modulePath + "/third_party/raft"

// TestMainModuleHasNoReplace: a replace directive applies only when this module is the main
// module, so an embedder would silently build something else than the tests ran.
func TestMainModuleHasNoReplace(t *testing.T) {
	f := mainGoMod(t)
	for _, r := range f.Replace {
		t.Errorf("go.mod replaces %s with %s: embedders do not see it", r.Old.Path, r.New.Path)
	}
}

// TestEmbedderBuildsThePatchedRaft serves this checkout from a file module proxy, builds a
// scratch module that requires it (no replace directive) and embeds a node, and checks that
// the build holds the patched Raft of third_party/raft, from the module's zip.
func TestEmbedderBuildsThePatchedRaft(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	start := time.Now()
	step := func(name string) {
		t.Logf("%-12s %v", name, time.Since(start).Round(time.Millisecond))
		start = time.Now()
	}
	root := testkit.ModuleRoot(t)
	modCache := strings.TrimSpace(run(t, root, nil, goBin, "env", "GOMODCACHE"))
	version := freshVersion(t)
	proxy := t.TempDir()
	writeProxy(t, proxy, root, version)
	t.Cleanup(func() { removeFromModCache(t, modCache, version) })
	step("proxy")

	scratch := t.TempDir()
	writeScratchModule(t, scratch, mainGoMod(t).Go.Version, version)
	// This module comes from the file proxy; the rest from the module cache, and what the
	// main module's `go mod download` left out (go mod tidy also loads the tests of
	// dependencies) from the proxy the machine is set up with.
	proxies := []string{fileURL(proxy), fileURL(filepath.Join(modCache, "cache", "download"))}
	if p := strings.TrimSpace(run(t, root, nil, goBin, "env", "GOPROXY")); p != "" && p != "off" {
		proxies = append(proxies, p)
	}
	env := []string{
		"GOPROXY=" + strings.Join(proxies, ","),
		"GOMODCACHE=" + modCache,
		"GOFLAGS=-mod=mod -modcacherw",
		"GOSUMDB=off",
		"GONOSUMDB=" + modulePath,
		"GOPRIVATE=", // GOPRIVATE (and GONOPROXY) would send the go command to GitHub, not the proxy
		"GONOPROXY=",
		"GOWORK=off",
		"GOTOOLCHAIN=local",
	}
	run(t, scratch, env, goBin, "mod", "tidy")
	step("mod tidy")

	mod := run(t, scratch, env, goBin, "list", "-m", "-f", "{{.Version}} {{.Replace}}", modulePath)
	if got, want := strings.TrimSpace(mod), version+" <nil>"; got != want {
		t.Fatalf("go list -m %s = %q, want %q (the proxy's version, not replaced)", modulePath, got, want)
	}
	deps := strings.Fields(run(t, scratch, env, goBin, "list", "-deps", "-f", "{{.ImportPath}}", "."))
	if !slices.Contains(deps, forkPath) {
		t.Fatalf("%s is not in the embedder's build: %v", forkPath, deps)
	}
	forkDir := strings.TrimSpace(run(t, scratch, env, goBin, "list", "-f", "{{.Dir}}", forkPath))
	if !strings.HasPrefix(forkDir, modCache) {
		t.Fatalf("%s built from %s, not from the module cache", forkPath, forkDir)
	}
	src, err := os.ReadFile(filepath.Join(forkDir, "raft.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "func (r *Raft) discardConflictingLog(") {
		t.Fatalf("%s/raft.go lacks the kvoffload patch (third_party/raft/KVOFFLOAD.md)", forkDir)
	}
	step("go list")

	bin := filepath.Join(scratch, "embedder")
	build := []string{"build", "-o", bin}
	if raceEnabled {
		build = append(build, "-race")
	}
	run(t, scratch, env, goBin, append(build, ".")...)
	step("go build")

	out := run(t, scratch, nil, bin, t.TempDir())
	for _, want := range []string{"*node.Node: embedder/0 Stored Found", "*client.Client: embedder/1 Stored Found", "embedded node opened and closed"} {
		if !strings.Contains(out, want) {
			t.Fatalf("embedder printed %q, want a line %q", out, want)
		}
	}
	step("run")
}

// writeScratchModule writes the embedder's go.mod, requiring this module at version and
// nothing else, and its main package from testdata/embedder.
func writeScratchModule(t *testing.T, dir, goVersion, version string) {
	t.Helper()
	gomod := fmt.Sprintf("module example.com/embedder\n\ngo %s\n\nrequire %s %s\n", goVersion, modulePath, version)
	main, err := os.ReadFile(filepath.Join("testdata", "embedder", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "main.go": main} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// run runs name with args in dir, with env added to the test's environment, and returns
// its standard output; it fails the test on an error, showing standard error.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func fileURL(dir string) string { return "file://" + filepath.ToSlash(dir) }

func mainGoMod(t *testing.T) *modfile.File {
	t.Helper()
	path := filepath.Join(testkit.ModuleRoot(t), "go.mod")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse(path, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
