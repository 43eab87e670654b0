package bucketstore

import (
	"fmt"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// TestStoreCrash writes records, syncing some, crashes the memfs.FS in every mode and checks
// that every synced record survives, and that whatever else Scan finds either verifies as a
// record the test wrote or is reported as damage.
func TestStoreCrash(t *testing.T) {
	rng := testkit.Rand(t)
	for _, mode := range []memfs.CrashMode{memfs.CrashDropAll, memfs.CrashPrefix, memfs.CrashTorn} {
		for round := range 20 {
			t.Run(fmt.Sprintf("mode%d/round%d", mode, round), func(t *testing.T) {
				m := memfs.New()
				cfg := memConfig(m)
				cfg.BucketSize = 8 * Alignment
				s := mustOpen(t, cfg)
				byKey := map[string]written{}
				var synced []written
				for i := range 12 {
					w := mustPut(t, s, fmt.Sprintf("k%d", i), uint64(i), rng.IntN(3*Alignment))
					byKey[w.h.Key] = w
					if rng.IntN(3) == 0 {
						if err := s.Sync(w.ext.Bucket); err != nil {
							t.Fatal(err)
						}
						synced = append(synced, byKey[w.h.Key])
					}
				}
				cfg.FS = m.Crash(mode, rng)
				s2 := mustOpen(t, cfg)
				for _, w := range synced {
					mustRead(t, s2, w)
				}
				for _, sc := range mustScan(t, s2) {
					if sc.err != nil {
						continue
					}
					if w, ok := byKey[sc.h.Key]; !ok || w.ext != sc.ext || w.h != sc.h {
						t.Fatalf("Scan found a record the test never wrote: %+v", sc)
					}
				}
			})
		}
	}
}
