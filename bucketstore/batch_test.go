package bucketstore

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/kvoffload/kvoffload/vfs/errorfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// A run reserved with ReserveRun is back to back, is written with one write per MaxRunBytes,
// and every record of it reads back verified, before and after a reopen.
func TestReserveRunWriteRecords(t *testing.T) {
	r := testRand(t)
	writes := 0
	fsys := errorfs.Wrap(memfs.New(), func(op errorfs.Op, name string) error {
		if op == errorfs.OpWrite {
			writes++
		}
		return nil
	})
	cfg := memConfig(fsys)
	cfg.BucketSize = 64 << 20
	s := mustOpen(t, cfg)
	var recs []RecordWrite
	var sizes []int64
	for i := range 40 {
		key := fmt.Sprintf("run/%d", i)
		payload := testPayload(uint64(i), 1+r.IntN(300<<10))
		recs = append(recs, RecordWrite{Header: testHeader(key, uint64(i), payload), Payload: payload})
		sizes = append(sizes, RecordSize(len(key), len(payload)))
	}
	exts, err := s.ReserveRun(sizes)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for i, e := range exts {
		if i > 0 && e.Offset != exts[i-1].End() || e.Bucket != exts[0].Bucket || e.Length != sizes[i] {
			t.Fatalf("extent %d %+v does not follow %+v", i, e, exts[max(i-1, 0)])
		}
		recs[i].Ext = e
		total += e.Length
	}
	before := writes
	for i, err := range s.WriteRecords(recs) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	// Each run is at most MaxRunBytes, so a few writes, not 40.
	if got, most := writes-before, int(total/MaxRunBytes)+2; got > most {
		t.Fatalf("%d writes for %d bytes in %d records, want at most %d", got, total, len(recs), most)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		for _, rec := range recs {
			mustRead(t, s, written{ext: rec.Ext, h: rec.Header, payload: rec.Payload})
		}
	}
	check(s)
	mustClose(t, s)
	check(mustOpen(t, cfg))
}

// ReserveRun is all or nothing: over the quota it reserves nothing, and the caller falls back
// to record-by-record reservations.
func TestReserveRunAllOrNothing(t *testing.T) {
	cfg := memConfig(nil)
	cfg.Capacity = 10 * Alignment
	s := mustOpen(t, cfg)
	if _, err := s.ReserveRun([]int64{4 * Alignment, 4 * Alignment, 4 * Alignment}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a run over the quota: %v, want ErrNoSpace", err)
	}
	if st := mustStats(t, s); st.LiveBytes != 0 {
		t.Fatalf("a refused run left %d bytes live", st.LiveBytes)
	}
	if _, err := s.ReserveRun([]int64{4 * Alignment, 100}); err == nil {
		t.Fatal("a size that is not a multiple of Alignment was accepted")
	}
	if _, err := s.ReserveRun([]int64{cfg.BucketSize, Alignment}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a run over BucketSize: %v, want ErrTooLarge", err)
	}
}

// A failed write fails every record of its run and none of the others.
func TestWriteRecordsFailedRun(t *testing.T) {
	n := 0
	fsys := errorfs.Wrap(memfs.New(), func(op errorfs.Op, name string) error {
		if op == errorfs.OpWrite {
			if n++; n == 1 {
				return syscall.EIO
			}
		}
		return nil
	})
	cfg := memConfig(fsys)
	cfg.BucketSize = 64 << 20
	s := mustOpen(t, cfg)
	var recs []RecordWrite
	for i := range 4 {
		key := fmt.Sprintf("f/%d", i)
		payload := testPayload(uint64(i), 3<<20) // 3 MiB: two records per 8 MiB run
		recs = append(recs, RecordWrite{Header: testHeader(key, uint64(i), payload), Payload: payload})
	}
	sizes := make([]int64, len(recs))
	for i, rec := range recs {
		sizes[i] = RecordSize(len(rec.Header.Key), len(rec.Payload))
	}
	exts, err := s.ReserveRun(sizes)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		recs[i].Ext = exts[i]
	}
	errs := s.WriteRecords(recs)
	if errs[0] == nil || errs[1] == nil || errs[2] != nil || errs[3] != nil {
		t.Fatalf("errors %v: want the first run (records 0 and 1) failed, the second written", errs)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	mustRead(t, s, written{ext: recs[2].Ext, h: recs[2].Header, payload: recs[2].Payload})
}
