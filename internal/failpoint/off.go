//go:build !chaos

package failpoint

// Enabled reports whether failpoints are compiled in.
const Enabled = false

// Hit is a no-op in normal builds.
func Hit(string) error { return nil }

// Crash is a no-op in normal builds (Hit never asks for it).
func Crash() {}
