package fsm

import (
	"fmt"
	"testing"
)

// BenchmarkApplyCommit measures FSM apply of COMMIT commands of 256 new keys each (decode,
// the live and generation maps, the extent index's overlap check, the retained result), as
// Raft's apply goroutine runs it: one command at a time on one core. keys/s is the figure
// issue 9's 200,000 metadata keys/s on one node is held against; the extents are 4 KiB
// records laid out back to back in 1 GiB buckets, like a real node's. The store's state
// grows through the run (b.N commands, b.N*256 live keys).
func BenchmarkApplyCommit(b *testing.B) {
	b.Run("one", func(b *testing.B) { benchApplyCommit(b, 1) })
	// raft's batches on a restart's replay (MaxAppendEntries), decoded ahead of apply
	b.Run("batched", func(b *testing.B) { benchApplyCommit(b, 64) })
}

// benchApplyCommit applies b.N COMMITs of 256 keys, batch commands per call (1: through
// ApplyCommand, more: ApplyCommands).
func benchApplyCommit(b *testing.B, batch int) {
	const keys, rec = 256, 4096
	cmds := make([][]byte, b.N)
	index := make([]uint64, b.N)
	for i := range cmds {
		c := Commit{TxnID: TxnID{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24), 1}, Node: "n1"}
		for k := range keys {
			n := int64(i*keys + k)
			c.Entries = append(c.Entries, Entry{
				Key: fmt.Sprintf("bench/%d", n), Gen: 1, Sum: uint64(n), Size: 64,
				Extent: Extent{Bucket: uint32(n * rec >> 30), Offset: n * rec % (1 << 30), Length: rec},
			})
		}
		cmds[i], index[i] = EncodeCommit(c), uint64(i+1)
	}
	f := New()
	b.ResetTimer()
	for lo := 0; lo < len(cmds); lo += batch {
		hi := min(lo+batch, len(cmds))
		var res []*Result
		if batch == 1 {
			res = []*Result{f.ApplyCommand(index[lo], cmds[lo])}
		} else {
			res = f.ApplyCommands(index[lo:hi], cmds[lo:hi])
		}
		for i, r := range res {
			if r == nil || len(r.Keys) != keys || r.Keys[0].Outcome != OutcomeStored {
				b.Fatalf("command %d: %+v", lo+i, r)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*keys)/b.Elapsed().Seconds(), "keys/s")
}

// BenchmarkDecodeCommit measures decoding one COMMIT of 256 entries (what a log replay
// decodes ahead of apply, per command).
func BenchmarkDecodeCommit(b *testing.B) {
	c := Commit{TxnID: TxnID{1}, Node: "n1"}
	for k := range 256 {
		c.Entries = append(c.Entries, Entry{Key: fmt.Sprintf("startup@%09d", k), Gen: 1, Sum: uint64(k), Size: 1024,
			Extent: Extent{Bucket: 7, Offset: int64(k) * 4096, Length: 4096}})
	}
	data := EncodeCommit(c)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/256, "ns/key")
}
