package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/node"
)

// runRoot runs the storenode command with args and returns what it printed.
func runRoot(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := rootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// `storenode version` and `storenode --version` print the same line: the build's version,
// revision and Go version; --json prints the facts as fields.
func TestVersionCommand(t *testing.T) {
	want := versionLine(node.ReadBuild()) + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		got, err := runRoot(t, args...)
		if err != nil || got != want {
			t.Errorf("storenode %s: %q, %v; want %q", strings.Join(args, " "), got, err, want)
		}
	}
	if !strings.Contains(want, runtime.Version()) {
		t.Errorf("%q does not name the Go version %s", want, runtime.Version())
	}
	got, err := runRoot(t, "version", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var b node.Build
	if err := json.Unmarshal([]byte(got), &b); err != nil || b != node.ReadBuild() {
		t.Errorf("version --json: %q (%v), want %+v", got, err, node.ReadBuild())
	}
	line := versionLine(node.Build{Version: "v1.2.3", Revision: "abc123", Time: "2026-01-02T03:04:05Z", Modified: true, GoVersion: "go1.26.0"})
	if want := "storenode v1.2.3, revision abc123 2026-01-02T03:04:05Z (modified), go1.26.0"; line != want {
		t.Errorf("versionLine: %q, want %q", line, want)
	}
}
