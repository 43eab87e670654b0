//go:build !chaos

package failpoint

import (
	"errors"
	"testing"
)

// TestEnableFuncNormalBuild checks the one way to arm a point without -tags chaos: nth
// counts from the arming, Disable disarms, and Hit is nil again once nothing is armed.
func TestEnableFuncNormalBuild(t *testing.T) {
	boom := errors.New("boom")
	if err := Hit(WALWriteBatch); err != nil {
		t.Fatalf("unarmed Hit = %v", err)
	}
	EnableFunc(WALWriteBatch, 2, func() error { return boom })
	EnableFunc(WALSyncDir, 0, func() error { return boom })
	t.Cleanup(func() { Disable(WALWriteBatch); Disable(WALSyncDir) })
	var got []error
	for range 3 {
		got = append(got, Hit(WALWriteBatch))
	}
	if got[0] != nil || !errors.Is(got[1], boom) || got[2] != nil {
		t.Fatalf("hits 1..3 of an @2 point = %v, want [nil boom nil]", got)
	}
	if err := Hit(WALTruncateFront); err != nil {
		t.Fatalf("Hit of another point = %v", err)
	}
	if err := Hit(WALSyncDir); !errors.Is(err, boom) {
		t.Fatalf("every-hit point = %v, want boom", err)
	}
	Disable(WALSyncDir)
	Disable(WALWriteBatch)
	if anyArmed.Load() || Hit(WALSyncDir) != nil {
		t.Fatal("a point still fires after Disable of every point")
	}
}
