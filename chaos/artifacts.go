package chaos

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ArtifactsEnv names the directory where a failing test keeps its data directories, histories
// and porcupine output (scripts/soak.sh sets it).
const ArtifactsEnv = "KVOFFLOAD_CHAOS_ARTIFACTS"

// KeepOnFailure copies dirs into $KVOFFLOAD_CHAOS_ARTIFACTS/<test name>/ when t has failed,
// before t.TempDir removes them. Call it after creating the directories.
func KeepOnFailure(t testing.TB, dirs ...string) {
	root := os.Getenv(ArtifactsEnv)
	if root == "" {
		return
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		dst := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
		for _, d := range dirs {
			if err := copyDir(d, filepath.Join(dst, filepath.Base(d))); err != nil {
				t.Logf("keeping %s: %v", d, err)
			}
		}
		t.Logf("kept the failing run's files in %s", dst)
	})
}

func copyDir(src, dst string) error {
	return filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o750)
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
}
