//go:build invariants

package invariants

// Enabled reports whether the assertions are compiled in: true with -tags invariants.
const Enabled = true
