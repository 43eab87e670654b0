package fsm

import "testing"

// The extent index finds an overlap even among live extents that overlap each other: state
// restored from a snapshot written before apply refused overlaps (or a forged one) breaks the
// order of extent ends a scan could otherwise rely on, so the scan must not rely on it.
func TestOverlapAmongOverlappingLiveExtents(t *testing.T) {
	s := newState()
	a := Entry{Key: "a", Owner: "n1", Gen: 1, Extent: Extent{Bucket: 1, Offset: 0, Length: 3 * ExtentAlignment}}
	b := Entry{Key: "b", Owner: "n1", Gen: 1, Extent: Extent{Bucket: 1, Offset: ExtentAlignment, Length: ExtentAlignment}}
	s.addLive(a)
	s.addLive(b)
	if err := s.checkIndex(); err != nil {
		t.Fatal(err)
	}
	c := Extent{Bucket: 1, Offset: 2 * ExtentAlignment, Length: ExtentAlignment} // inside a, after b
	if e, ok := s.overlapping("n1", c, "c"); !ok || e.Key != "a" {
		t.Fatalf("an extent inside a's bytes overlaps %q (%v), want a", e.Key, ok)
	}
	s.delLive(a)
	if err := s.checkIndex(); err != nil {
		t.Fatal(err)
	}
	if e, ok := s.overlapping("n1", c, "c"); ok {
		t.Fatalf("after a's removal, %+v overlaps %q", c, e.Key)
	}
	if e, ok := s.overlapping("n1", b.Extent, "x"); !ok || e.Key != "b" {
		t.Fatalf("b's own extent overlaps %q (%v), want b", e.Key, ok)
	}
}
