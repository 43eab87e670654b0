//go:build !chaos

package mutant

// On reports false in normal builds.
func On(string) bool { return false }
