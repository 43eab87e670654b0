package node

import (
	"context"
	"testing"
)

// TestFailedRemoveFreesNothing: a removed key's bytes are freed only after its REMOVE is
// applied (docs/design.md, "Deletes and generations"), so a Remove that never reaches Raft
// leaves the key readable with its bytes, and the accounting unchanged.
func TestFailedRemoveFreesNothing(t *testing.T) {
	n := mustOpen(t, testConfig(t.TempDir()))
	defer mustClose(t, n)
	keys := []string{keyOf("rmfail", 0), keyOf("rmfail", 1)}
	mustOffload(t, n, objects(1, 32<<10, keys...))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.Remove(ctx, keys[:1]); err == nil {
		t.Fatal("a Remove with a cancelled context succeeded")
	}
	checkReadable(t, n, 1, 32<<10, keys...)
	checkConsistent(t, n)
}
