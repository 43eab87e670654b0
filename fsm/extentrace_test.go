package fsm

import (
	"sync"
	"testing"
)

// Readers of the extent index under the read lock (Referenced, CheckCommit) run while others
// read and while apply writes: they must not write what apply keeps aside (state.chunk), or
// -race reports it (the last-chunk cache was at first written under the read lock too).
func TestExtentIndexConcurrentReaders(t *testing.T) {
	f := New()
	var entries []Entry
	for i := range 64 {
		entries = append(entries, ent(string(rune('a'+i%26))+string(rune('a'+i/26)), 1, uint64(i)))
	}
	f.ApplyCommand(1, EncodeCommit(Commit{TxnID: id(1), Node: "n1", Entries: entries[:32]}))
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				e := entries[(i+r)%len(entries)]
				f.Referenced("n1", e.Extent, "someone else")
				_ = f.CheckCommit(Commit{TxnID: id(9), Node: "n1", Entries: []Entry{e}}, "n1", 0)
			}
		}()
	}
	for i := 32; i < len(entries); i++ {
		f.ApplyCommand(uint64(i), EncodeCommit(Commit{TxnID: id(byte(i)), Node: "n1", Entries: entries[i : i+1]}))
	}
	wg.Wait()
	mustCheck(t, f)
}
