package bucketstore

import (
	"fmt"
	"testing"
)

// putRun reserves and writes one run of records of the given payload lengths.
func putRun(tb testing.TB, s *Store, prefix string, lens ...int) []written {
	tb.Helper()
	recs := make([]RecordWrite, len(lens))
	sizes := make([]int64, len(lens))
	for i, n := range lens {
		key := fmt.Sprintf("%s/%d", prefix, i)
		payload := testPayload(uint64(i*7+n), n)
		recs[i] = RecordWrite{Header: testHeader(key, uint64(i), payload), Payload: payload}
		sizes[i] = RecordSize(len(key), n)
	}
	exts, err := s.ReserveRun(sizes)
	if err != nil {
		tb.Fatalf("ReserveRun: %v", err)
	}
	for i := range recs {
		recs[i].Ext = exts[i]
	}
	ws := make([]written, len(recs))
	for i, err := range s.WriteRecords(recs) {
		if err != nil {
			tb.Fatalf("record %d: %v", i, err)
		}
		ws[i] = written{ext: recs[i].Ext, h: recs[i].Header, payload: recs[i].Payload}
	}
	return ws
}

// A run packs its records at Alignment, starts at a multiple of WriteAlignment and is padded
// to one; the next reservation starts after the padding. The records read back, before and
// after a reopen, and Scan finds each at its offset.
func TestRunPacksRecords(t *testing.T) {
	storeBackends(t, func(t *testing.T, cfg Config) {
		s := mustOpen(t, cfg)
		a := putRun(t, s, "a", 64, 4096, 0, 64, 4096) // 512, 4608, 512, 512, 4608 bytes
		b := putRun(t, s, "b", 64)
		c := mustPut(t, s, "c", 9, 64)
		wantOff := []int64{0, 512, 5120, 5632, 6144}
		for i, w := range a {
			if w.ext.Offset != wantOff[i] {
				t.Fatalf("record %d at %d, want %d", i, w.ext.Offset, wantOff[i])
			}
		}
		if end := a[4].ext.End(); b[0].ext.Offset != alignUp(end, WriteAlignment) || c.ext.Offset != WriteAlignment+b[0].ext.Offset {
			t.Fatalf("run ends at %d; next run at %d, next record at %d: want each at the next multiple of %d",
				end, b[0].ext.Offset, c.ext.Offset, WriteAlignment)
		}
		all := append(append(a, b...), c)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		for _, w := range all {
			mustRead(t, s, w)
		}
		mustClose(t, s)
		s = mustOpen(t, cfg)
		got := mustScan(t, s)
		if len(got) != len(all) {
			t.Fatalf("Scan found %d records, want %d: %+v", len(got), len(all), got)
		}
		for i, g := range got {
			if g.err != nil || g.ext != all[i].ext || g.h != all[i].h {
				t.Fatalf("Scan entry %d: %+v, want %+v", i, g, all[i])
			}
			if err := s.Adopt(g.ext); err != nil {
				t.Fatal(err)
			}
			mustRead(t, s, all[i])
		}
	})
}

// Freeing records that share a filesystem block with others zeroes only their bytes: the
// neighbours read back, the accounting (with the run's padding) stays exact, and the block
// is freed by Collect once nothing in it is live.
func TestFreeInSharedBlock(t *testing.T) {
	storeBackends(t, func(t *testing.T, cfg Config) {
		s := mustOpen(t, cfg)
		ws := putRun(t, s, "s", 64, 64, 64, 64, 64, 64, 64, 64, 3000) // 8 records in block 0
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		live := map[Extent]bool{}
		for _, w := range ws {
			live[w.ext] = true
		}
		for _, i := range []int{3, 0, 8, 7} { // the last one releases the run's padding
			if err := s.Free(ws[i].ext); err != nil {
				t.Fatal(err)
			}
			delete(live, ws[i].ext)
			checkAccounting(t, s, live)
			if _, err := s.Read(ws[i].ext, ws[i].h); !IsCorrupt(err) {
				t.Fatalf("Read of freed record %d: %v, want ErrCorrupt", i, err)
			}
		}
		for e := range live {
			for _, w := range ws {
				if w.ext == e {
					mustRead(t, s, w)
				}
			}
		}
	})
}

// A record inside a run cannot be written on its own, nor a stretch of a run that starts
// inside a filesystem block or ends in one shared with a live neighbour: the pwrite would zero
// the neighbour's bytes.
func TestWriteRefusesPartialBlocks(t *testing.T) {
	s := mustOpen(t, memConfig(nil))
	sizes := []int64{512, 512, 512}
	exts, err := s.ReserveRun(sizes)
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]RecordWrite, len(exts))
	for i, e := range exts {
		payload := testPayload(uint64(i), 10)
		recs[i] = RecordWrite{Ext: e, Header: testHeader("k", uint64(i), payload), Payload: payload}
	}
	for name, sub := range map[string][]RecordWrite{
		"first alone":      recs[:1],
		"middle alone":     recs[1:2],
		"a prefix":         recs[:2],
		"an inner stretch": recs[1:],
	} {
		for _, err := range s.WriteRecords(sub) {
			if err == nil {
				t.Errorf("%s: written, want an error", name)
			}
		}
	}
	if err := s.WriteRecord(recs[1].Ext, recs[1].Header, recs[1].Payload); err == nil {
		t.Error("WriteRecord of the middle record: written, want an error")
	}
	for i, err := range s.WriteRecords(recs) {
		if err != nil {
			t.Fatalf("the whole run, record %d: %v", i, err)
		}
	}
}

// A run over MaxRunBytes is laid out in write units of at most MaxRunBytes, each starting at
// a multiple of WriteAlignment, and WriteRecords writes each with one pwrite.
func TestRunSplitsAtWriteUnits(t *testing.T) {
	cfg := memConfig(nil)
	cfg.BucketSize = 64 << 20
	s := mustOpen(t, cfg)
	ws := putRun(t, s, "big", 3<<20, 3<<20, 3<<20, 100, 9<<20, 100)
	var starts []int64
	for i, w := range ws {
		if i == 0 || w.ext.Offset != ws[i-1].ext.End() {
			starts = append(starts, w.ext.Offset)
		}
	}
	for _, off := range starts {
		if off%WriteAlignment != 0 {
			t.Fatalf("write unit at %d, not a multiple of %d", off, WriteAlignment)
		}
	}
	// 3+3 | 3+100 B | 9 | 100 B: four units.
	if len(starts) != 4 {
		t.Fatalf("%d write units at %v, want 4", len(starts), starts)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		mustRead(t, s, w)
	}
}

// TestFreeReclaimsSharedBlocks frees records of random runs in random order and checks, after
// every Free, that the live ones read back and that exactly the filesystem blocks some live
// record or its unit's padding touches stay allocated: a block is deallocated when the last
// record in it is freed (memfs models hole punching of partial blocks as zeroing).
func TestFreeReclaimsSharedBlocks(t *testing.T) {
	rng := testRand(t)
	cfg := memConfig(nil)
	cfg.BucketSize = 64 << 20
	s := mustOpen(t, cfg)
	var live []written
	for run := range 12 {
		lens := make([]int, 1+rng.IntN(12))
		for i := range lens {
			lens[i] = []int{0, 64, 400, 4096, 5000, 20000}[rng.IntN(6)]
		}
		live = append(live, putRun(t, s, fmt.Sprintf("r%d", run), lens...)...)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	for len(live) > 0 {
		i := rng.IntN(len(live))
		w := live[i]
		live = append(live[:i], live[i+1:]...)
		if err := s.Free(w.ext); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		blocks := map[int64]bool{}
		var pads map[int64]int64
		if b := s.buckets[w.ext.Bucket]; b != nil {
			pads = b.pads
		}
		for _, l := range live {
			end := l.ext.End() + pads[l.ext.Offset]
			for blk := l.ext.Offset / WriteAlignment; blk <= (end-1)/WriteAlignment; blk++ {
				blocks[blk] = true
			}
		}
		s.mu.Unlock()
		if st := mustStats(t, s); st.AllocatedBytes != int64(len(blocks))*WriteAlignment {
			t.Fatalf("after freeing %+v: %d bytes allocated, the %d blocks live records touch are %d",
				w.ext, st.AllocatedBytes, len(blocks), int64(len(blocks))*WriteAlignment)
		}
		for _, l := range live {
			mustRead(t, s, l)
		}
	}
}
