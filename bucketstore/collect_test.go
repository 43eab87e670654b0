package bucketstore

import (
	"testing"
)

// TestCollect writes eight records into one bucket, reopens (sealing it), keeps four live and
// checks gaps punched, tail truncated, idempotence, and removal when nothing is live. Four
// live extents keep the ext4 extent tree inside the inode, so st_blocks counts data only.
func TestCollect(t *testing.T) {
	storeBackends(t, func(t *testing.T, cfg Config) {
		s := mustOpen(t, cfg)
		var ws []written
		for i := range 8 {
			ws = append(ws, mustPut(t, s, "k", uint64(i), (i%3+1)*Alignment))
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		mustClose(t, s)
		s = mustOpen(t, cfg)
		id := ws[0].ext.Bucket
		keep := []written{ws[6], ws[1], ws[4], ws[3]} // leading gap, middle gap, tail
		var live []Extent
		var liveBytes int64
		for _, w := range keep {
			live = append(live, w.ext)
			liveBytes += w.ext.Length
		}
		before := mustStats(t, s)
		freed, err := s.Collect(id, live)
		if err != nil {
			t.Fatal(err)
		}
		st := mustStats(t, s)
		if st.AllocatedBytes != liveBytes || st.LiveBytes != liveBytes {
			t.Fatalf("after Collect: allocated %d live %d, want %d", st.AllocatedBytes, st.LiveBytes, liveBytes)
		}
		if st.FileBytes != ws[6].ext.End() || freed != before.AllocatedBytes-liveBytes {
			t.Fatalf("file %d bytes (want %d), freed %d (want %d)",
				st.FileBytes, ws[6].ext.End(), freed, before.AllocatedBytes-liveBytes)
		}
		for _, w := range keep {
			mustRead(t, s, w)
		}
		if _, err := s.Read(ws[0].ext, ws[0].h); !IsCorrupt(err) {
			t.Fatalf("Read of collected record: %v, want ErrCorrupt", err)
		}
		if again, err := s.Collect(id, live); err != nil || again != 0 {
			t.Fatalf("second Collect: freed %d, %v; want 0, nil", again, err)
		}
		st2 := mustStats(t, s)
		st2.FreeBytes = st.FreeBytes // the filesystem's, which other processes change
		if st2 != st {
			t.Fatalf("second Collect changed stats: %+v -> %+v", st, st2)
		}
		if freed, err := s.Collect(id, nil); err != nil || freed != liveBytes {
			t.Fatalf("Collect with nothing live: freed %d, %v; want %d", freed, err, liveBytes)
		}
		if len(s.Buckets()) != 0 {
			t.Fatalf("bucket not removed: %v", s.Buckets())
		}
		if freed, err := s.Collect(id, nil); err != nil || freed != 0 {
			t.Fatalf("Collect of removed bucket: %d, %v", freed, err)
		}
		checkAccounting(t, s, nil)
	})
}

func TestCollectRejects(t *testing.T) {
	s := mustOpen(t, memConfig(nil))
	w := mustPut(t, s, "k", 1, 3*Alignment)
	id := w.ext.Bucket
	cases := map[string]struct {
		id   uint32
		live []Extent
	}{
		"open bucket":    {id, []Extent{w.ext}},
		"unknown bucket": {id + 5, []Extent{{Bucket: id + 5, Offset: 0, Length: Alignment}}},
		"other bucket":   {id, []Extent{{Bucket: id + 1, Offset: 0, Length: Alignment}}},
		"overlap":        {id, []Extent{{Bucket: id, Offset: 0, Length: 2 * Alignment}, {Bucket: id, Offset: Alignment, Length: Alignment}}},
		"unaligned":      {id, []Extent{{Bucket: id, Offset: 100, Length: Alignment}}},
	}
	for name, tc := range cases {
		if _, err := s.Collect(tc.id, tc.live); err == nil {
			t.Errorf("%s: Collect succeeded", name)
		}
	}
}
