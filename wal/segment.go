package wal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strconv"
)

// This file reads tidwall/wal's binary segment framing directly, so that Open
// can verify and repair the log before tidwall parses it.
//
// tidwall names a segment file by the 20-digit index of its first entry and
// stores each entry as uvarint(len(data)) || data. Interrupted truncations
// leave <index>.START or <index>.END files (and .TEMP files while they are
// being written); tidwall.Open finishes or ignores those, so they are never
// treated as segments here.

const segmentNameLen = 20

// segment is one tidwall segment file.
type segment struct {
	path  string
	index uint64 // index of the first entry, from the file name
}

// listSegments returns the segment files of dir in index order and whether an
// interrupted truncation (.START or .END file) is pending.
func (d disk) listSegments(dir string) (segs []segment, pending bool, err error) {
	names, err := d.fs.ReadDir(dir)
	if err != nil {
		return nil, false, fmt.Errorf("wal: list %s: %w", dir, err)
	}
	for _, name := range names { // sorted by name, hence by index
		if len(name) < segmentNameLen {
			continue
		}
		index, err := strconv.ParseUint(name[:segmentNameLen], 10, 64)
		if err != nil || index == 0 {
			continue
		}
		switch rest := name[segmentNameLen:]; {
		case rest == "":
			segs = append(segs, segment{path: filepath.Join(dir, name), index: index})
		case rest == ".START" || rest == ".END":
			pending = true
		}
		// Anything else, such as a half-written .TEMP copy, tidwall ignores.
	}
	return segs, pending, nil
}

// scan is the result of walking a segment's entries.
type scan struct {
	count  int    // valid entries before end
	end    int    // offset just past the last valid entry
	reason string // why the walk stopped before the end of the data; "" if it did not
}

// scanEntries walks data entry by entry, checking the framing and the
// envelope, and stops at the first defect.
func scanEntries(data []byte) scan {
	var s scan
	for s.end < len(data) {
		n, size, reason := frameAt(data[s.end:])
		if reason != "" {
			s.reason = reason
			return s
		}
		if _, err := decodeRecord(data[s.end+n : s.end+n+size]); err != nil {
			s.reason = err.Error()
			return s
		}
		s.end += n + size
		s.count++
	}
	return s
}

// frameAt decodes the uvarint length prefix of the entry at b[0]. It returns
// the prefix size and the data size, or a reason if the frame is incomplete.
func frameAt(b []byte) (n, size int, reason string) {
	v, n := binary.Uvarint(b)
	switch {
	case n == 0:
		return 0, 0, "truncated length prefix"
	case n < 0:
		return 0, 0, "overlong length prefix"
	case v > uint64(len(b)-n):
		return 0, 0, fmt.Sprintf("entry of %d bytes runs past the end of the file (%d bytes left)", v, len(b)-n)
	}
	return n, int(v), ""
}

// validEnvelopeAfter returns the offset of the first complete, valid envelope
// that starts after offset from, if any. Finding one means the damage at from
// is not a torn tail.
func validEnvelopeAfter(data []byte, from int) (int, bool) {
	for at := from + 1; at < len(data); {
		i := bytes.Index(data[at:], []byte(envMagic))
		if i < 0 {
			return 0, false
		}
		at += i
		if _, ok := envelopeAt(data[at:]); ok {
			return at, true
		}
		at++
	}
	return 0, false
}

// countFrames counts the entries (or would-be entries) in a damaged tail:
// every frame that parses counts once, and an incomplete remainder counts once.
func countFrames(data []byte) int {
	count := 0
	for len(data) > 0 {
		count++
		n, size, reason := frameAt(data)
		if reason != "" {
			break
		}
		data = data[n+size:]
	}
	return count
}

// locateEntry finds the segment file and byte offset of entry index, for
// error reports. It returns "" and -1 for what it cannot find.
func (d disk) locateEntry(dir string, index uint64) (string, int64) {
	segs, _, err := d.listSegments(dir)
	if err != nil {
		return "", -1
	}
	i := len(segs) - 1
	for i >= 0 && segs[i].index > index {
		i--
	}
	if i < 0 {
		return "", -1
	}
	data, err := d.readFile(segs[i].path)
	if err != nil {
		return segs[i].path, -1
	}
	off := 0
	for k := segs[i].index; k < index; k++ {
		n, size, reason := frameAt(data[off:])
		if reason != "" {
			return segs[i].path, -1
		}
		off += n + size
	}
	return segs[i].path, int64(off)
}
