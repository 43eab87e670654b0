package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

// A snapshot many times the decoder's window restores the same state whether the stream
// hands it over whole, one byte at a time or in halves: fields straddle the window's end, a
// string longer than the window grows it. Cut anywhere, it is refused as ErrBadSnapshot; a
// read error is reported with its cause.
func TestSnapshotStreamWindow(t *testing.T) {
	f := New()
	for c := range 20 {
		var es []Entry
		for k := range 256 {
			key := fmt.Sprintf("%s-%d-%d", strings.Repeat("k", 1+(c*256+k)%1000), c, k)
			es = append(es, Entry{Key: key, Gen: 1, Sum: uint64(k), Size: 10, Extent: Extent{Bucket: uint32(c + 1), Offset: int64(k) * 4096, Length: 4096}})
		}
		f.ApplyCommand(uint64(c+1), commit(byte(c), es...))
	}
	long := strings.Repeat("a", 3*streamWindow) // a member address longer than the window
	f.ApplyCommand(21, setMember(200, "n9", long, "api"))
	var snap bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	if snap.Len() < 10*streamWindow {
		t.Fatalf("snapshot of %d bytes: want one many times the %d-byte window", snap.Len(), streamWindow)
	}
	for name, r := range map[string]io.Reader{
		"whole":    bytes.NewReader(snap.Bytes()),
		"one byte": iotest.OneByteReader(bytes.NewReader(snap.Bytes())),
		"halves":   iotest.HalfReader(bytes.NewReader(snap.Bytes())),
	} {
		g := New()
		if err := g.Restore(r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if g.Hash() != f.Hash() {
			t.Fatalf("%s: restored state differs", name)
		}
		mustCheck(t, g)
	}
	for _, cut := range []int{1, 5, streamWindow - 1, streamWindow, streamWindow + 7, snap.Len() / 2, snap.Len() - 9, snap.Len() - 1} {
		if err := New().Restore(bytes.NewReader(snap.Bytes()[:cut])); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("snapshot cut at %d of %d bytes: %v, want ErrBadSnapshot", cut, snap.Len(), err)
		}
	}
	if err := New().Restore(bytes.NewReader(append(snap.Bytes(), 0))); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("a byte after the checksum: %v, want ErrBadSnapshot", err)
	}
	broken := errors.New("disk gone")
	r := io.MultiReader(bytes.NewReader(snap.Bytes()[:snap.Len()/2]), iotest.ErrReader(broken))
	if err := New().Restore(r); !errors.Is(err, ErrBadSnapshot) || !errors.Is(err, broken) {
		t.Fatalf("a read error halfway: %v, want ErrBadSnapshot wrapping %v", err, broken)
	}
}

// zeroReader returns no bytes and no error, forever.
type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

// A stream that stops making progress without an error is refused (io.ErrNoProgress, as
// bufio gives), not read forever.
func TestSnapshotStreamNoProgress(t *testing.T) {
	done := make(chan error, 1)
	go func() { done <- New().Restore(io.MultiReader(strings.NewReader(snapshotMagic+"\x03"), zeroReader{})) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrBadSnapshot) || !errors.Is(err, io.ErrNoProgress) {
			t.Fatalf("Restore of a stream that stops: %v, want ErrBadSnapshot wrapping io.ErrNoProgress", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Restore of a stream that returns nothing, forever, did not return")
	}
}

// Warm writes nothing: LookupEach, a reader under the FSM's read lock, runs concurrently with
// itself, so summing its loads into the index would be a data race (caught under -race).
func TestLookupEachConcurrent(t *testing.T) {
	f := New()
	f.ApplyCommand(1, commit(1, ent("a", 1, 1), ent("b", 1, 2)))
	keys := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				f.LookupEach(len(keys), func(i int) string { return keys[i] }, func(int, Entry, bool, uint64) {})
			}
		})
	}
	wg.Wait()
}
