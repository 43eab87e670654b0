// Package lint holds tests that hold the repository to its written rules; it has no code of
// its own. imports_test.go checks every import of every package against the rules of
// docs/architecture.md (the direction of imports), so a forbidden import fails go test ./...
// the way pebble's internal/lint fails a forbidden call. graph_test.go holds the package
// graph drawn in docs/architecture.md to the module: a package or an import of the code that
// ships that the graph lacks, or an arrow the code does not make, fails and names the line to
// edit. locks_test.go holds txn/doc.go's list of txn's mutexes, which the lock order is
// written over, to the mutexes txn declares. comments_test.go fails on a comment that tells
// how a bug was found instead of the rule it protects and the test that guards it.
package lint
