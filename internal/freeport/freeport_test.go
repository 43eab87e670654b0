package freeport

import "testing"

// TestAddrNeverRepeats: many calls in a row, none of whose ports is bound in between, still
// get distinct addresses.
func TestAddrNeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 500 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
	}
}
