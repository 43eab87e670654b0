package bucketstore

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// TestReadBatch reads a batch mixing good records, a damaged one, headers that do not match,
// an extent of a missing bucket and skipped reads, on both filesystems (OSFS takes the native
// AIO path), fresh and pooled, at several depths: every good record comes back verified with
// its own bytes, every bad one with ErrCorrupt, and each read that prep names is done once.
func TestReadBatch(t *testing.T) {
	storeBackends(t, func(t *testing.T, cfg Config) {
		rng := testkit.Rand(t)
		s := mustOpen(t, cfg)
		var ws []written
		for i := range 40 {
			ws = append(ws, mustPut(t, s, fmt.Sprintf("k%d", i), uint64(i+1), 16+rng.IntN(3*Alignment)))
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		flipped := 7
		flipByte(t, cfg.FS, bucketPath(cfg.Dir, ws[flipped].ext.Bucket), ws[flipped].ext.Offset+headerLen+int64(len(ws[flipped].h.Key))+1)
		type read struct {
			ext  Extent
			want Header
			bad  bool // must be ErrCorrupt
			skip bool
		}
		var reads []read
		for i, w := range ws {
			r := read{ext: w.ext, want: w.h, bad: i == flipped}
			switch i % 10 {
			case 3:
				r.want.Generation++
				r.bad = true
			case 5:
				r.skip = true
			}
			reads = append(reads, r)
		}
		reads = append(reads, read{ext: Extent{Bucket: 999, Offset: 0, Length: ws[0].ext.Length}, want: ws[0].h, bad: true})
		pastEnd := len(reads) // a record this long could exist, but not in this bucket: refused before its 1 GiB buffer
		reads = append(reads, read{ext: Extent{Bucket: ws[0].ext.Bucket, Offset: 0, Length: RecordSize(1, MaxPayloadLen)},
			want: Header{Key: "k", PayloadLen: MaxPayloadLen}, bad: true})
		for _, pooled := range []bool{false, true} {
			for _, depth := range []int{1, 32} {
				t.Run(fmt.Sprintf("pooled=%v/depth=%d", pooled, depth), func(t *testing.T) {
					var mu sync.Mutex
					seen := make([]int, len(reads))
					s.ReadBatch(len(reads), depth, pooled, func(i int) (Extent, Header, bool) {
						return reads[i].ext, reads[i].want, !reads[i].skip
					}, func(i int, payload []byte, release func(), err error) {
						mu.Lock()
						seen[i]++
						mu.Unlock()
						r := reads[i]
						switch {
						case r.bad && !IsCorrupt(err):
							t.Errorf("read %d: %v, want ErrCorrupt", i, err)
						case i == pastEnd && !strings.Contains(err.Error(), "past the end of the file"):
							t.Errorf("read past the end of the bucket: %v", err)
						case !r.bad && err != nil:
							t.Errorf("read %d: %v", i, err)
						case !r.bad && string(payload) != string(ws[i].payload):
							t.Errorf("read %d: payload differs", i)
						}
						if (release != nil) != (pooled && err == nil) {
							t.Errorf("read %d (pooled %v, err %v): release %v", i, pooled, err, release != nil)
						}
						if release != nil {
							release()
						}
					})
					for i, r := range reads {
						if want := map[bool]int{false: 1, true: 0}[r.skip]; seen[i] != want {
							t.Errorf("read %d: done %d times, want %d", i, seen[i], want)
						}
					}
				})
			}
		}
	})
}
