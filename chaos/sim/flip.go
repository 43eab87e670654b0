package sim

import (
	"fmt"
	"os"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// flipOdds: one power loss in this many also flips a bit of a stored record at rest.
const flipOdds = 4

// flipBit flips one bit of the record of a key m holds present, in the disk a power loss
// left, and marks the key damaged: it may then read Corrupt or NotFound, never wrong bytes.
func (s *sim) flipBit(mem *memfs.FS, log [][]byte, m *model) error {
	f := fsm.New()
	for i, cmd := range log {
		f.ApplyCommand(uint64(i+1), cmd)
	}
	var live []fsm.Entry
	for _, k := range s.keys {
		if e, ok := f.Lookup(k); ok && m.keys[k] == present {
			live = append(live, e)
		}
	}
	if len(live) == 0 {
		return nil
	}
	e := live[s.crashRng.IntN(len(live))]
	name := bucketFile(e.Extent.Bucket)
	file, err := mem.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("flip a bit of %s: %w", e.Key, err)
	}
	defer file.Close()
	off := e.Extent.Offset + s.crashRng.Int64N(e.Extent.Length)
	b := make([]byte, 1)
	if _, err := file.ReadAt(b, off); err != nil {
		return fmt.Errorf("flip a bit of %s: %w", e.Key, err)
	}
	b[0] ^= 1 << s.crashRng.IntN(8)
	if _, err := file.WriteAt(b, off); err != nil {
		return fmt.Errorf("flip a bit of %s: %w", e.Key, err)
	}
	if err := file.Sync(); err != nil {
		return fmt.Errorf("flip a bit of %s: %w", e.Key, err)
	}
	m.keys[e.Key] = damaged
	m.decided[e.Key]++ // a retry's older Stored names the record this damaged
	s.stats.BitFlips++
	s.trace("bit flipped in %s at %d", e.Key, off)
	return nil
}

// bucketFile is the path of bucket id's file, named as bucketstore/bucket.go's bucketName
// does (on-disk format).
func bucketFile(id uint32) string { return fmt.Sprintf("%s/bucket-%010d.kvb", bucketDir, id) }
