package bucketstore

import (
	"testing"
)

type scanned struct {
	ext Extent
	h   Header
	err error
}

func mustScan(tb testing.TB, s *Store) []scanned {
	tb.Helper()
	var out []scanned
	err := s.Scan(func(ext Extent, h Header, err error) error {
		out = append(out, scanned{ext, h, err})
		return nil
	})
	if err != nil {
		tb.Fatalf("Scan: %v", err)
	}
	return out
}

// TestScan: holes are skipped, a damaged payload is reported at its extent, a damaged header
// is reported up to the next valid record, and everything else is found in order.
func TestScan(t *testing.T) {
	cfg := memConfig(nil)
	s := mustOpen(t, cfg)
	var ws []written
	for i := range 6 {
		ws = append(ws, mustPut(t, s, "k", uint64(i), i*3000))
	}
	if err := s.Free(ws[1].ext); err != nil { // a hole
		t.Fatal(err)
	}
	path := bucketPath(testDir, ws[0].ext.Bucket)
	flipByte(t, cfg.FS, path, ws[3].ext.End()-Alignment) // payload or padding of record 3
	flipByte(t, cfg.FS, path, ws[4].ext.Offset)          // magic of record 4
	got := mustScan(t, s)
	want := []scanned{
		{ws[0].ext, ws[0].h, nil},
		{ws[2].ext, ws[2].h, nil},
		{ws[3].ext, Header{}, ErrCorrupt},
		{ws[4].ext, Header{}, ErrCorrupt},
		{ws[5].ext, ws[5].h, nil},
	}
	if len(got) != len(want) {
		t.Fatalf("Scan found %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.ext != w.ext || g.h != w.h || IsCorrupt(g.err) != (w.err != nil) {
			t.Errorf("entry %d: got %+v, want %+v", i, g, w)
		}
	}
}
