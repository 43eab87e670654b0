//go:build !invariants

package invariants

// Enabled reports whether the assertions are compiled in: false without -tags invariants, so
// every `if invariants.Enabled` block is dead code.
const Enabled = false
