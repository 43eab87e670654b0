package wal

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/kvoffload/kvoffload/internal/mutant"
	tidwall "github.com/kvoffload/kvoffload/third_party/tidwall/wal"
)

// RepairReport says what Open repaired at the tail; zero value = nothing repaired.
type RepairReport struct {
	Repaired       bool
	File           string // segment file that was cut (or removed, if it became empty)
	Offset         int64  // byte offset where the valid log now ends
	TruncatedBytes int64
	DroppedEntries int // entries (or would-be entries) removed
}

// layout is what Open learned about the segments before tidwall parses them.
type layout struct {
	segments  int    // number of segment files; 0 for a new log
	first     uint64 // index of the first entry
	last      uint64 // index of the last valid entry (first-1 if none)
	tailBytes int    // size of the last segment file
}

// finishTruncation lets tidwall finish an interrupted TruncateFront or
// TruncateBack (.START/.END files) by opening and closing the log once, then
// fsyncs the directory. tidwall does this clean-up before it parses the last
// segment, so a torn tail does not stop it; the tail is repaired afterwards.
func (d disk) finishTruncation(dir string, opts tidwall.Options, logger *slog.Logger) error {
	if _, pending, err := d.listSegments(dir); err != nil || !pending {
		return err
	}
	tw, openErr := tidwall.Open(dir, &opts)
	if openErr == nil {
		if err := tw.Close(); err != nil {
			return fmt.Errorf("wal: finish interrupted truncation in %s: %w", dir, err)
		}
	}
	_, pending, err := d.listSegments(dir)
	if err != nil {
		return err
	}
	if pending {
		return fmt.Errorf("wal: finish interrupted truncation in %s: %w",
			dir, errors.Join(ErrCorrupt, openErr))
	}
	logger.Info("finished an interrupted truncation")
	return d.syncDir(dir)
}

// verifyAndRepair checks every envelope of every segment and repairs a torn
// tail of the last segment (see the package doc for the rules).
func (d disk) verifyAndRepair(dir string, logger *slog.Logger) (layout, RepairReport, error) {
	segs, _, err := d.listSegments(dir)
	if err != nil || len(segs) == 0 {
		return layout{}, RepairReport{}, err
	}
	next, prevBytes, err := d.verifyOlder(segs[:len(segs)-1])
	if err != nil {
		return layout{}, RepairReport{}, err
	}
	tail := segs[len(segs)-1]
	if len(segs) > 1 && tail.index != next {
		return layout{}, RepairReport{}, gapError(tail, next)
	}
	data, err := d.readFile(tail.path)
	if err != nil {
		return layout{}, RepairReport{}, fmt.Errorf("wal: read segment: %w", err)
	}
	sc := scanEntries(data)
	lay := layout{
		segments:  len(segs),
		first:     segs[0].index,
		last:      tail.index + uint64(sc.count) - 1,
		tailBytes: sc.end,
	}
	if sc.reason == "" || mutant.On(mutant.AcceptTornWAL) { // mutation test only: the torn tail stays
		return lay, RepairReport{}, nil
	}
	if at, ok := validEnvelopeAfter(data, sc.end); ok {
		return layout{}, RepairReport{}, &CorruptError{
			File:   tail.path,
			Offset: int64(sc.end),
			Index:  tail.index + uint64(sc.count),
			Reason: fmt.Sprintf("%s; a valid entry follows at offset %d", sc.reason, at),
		}
	}
	removed := sc.end == 0 && len(segs) > 1
	if removed {
		lay.segments--
		lay.tailBytes = prevBytes
	}
	rep, err := d.cutTail(dir, tail, data, sc, removed, logger)
	return lay, rep, err
}

// verifyOlder checks every entry of segs, which precede the last segment, and
// that each segment starts where the previous one ended. It returns the index
// the next segment must start at and the size of the last of segs.
func (d disk) verifyOlder(segs []segment) (next uint64, lastBytes int, err error) {
	for i, seg := range segs {
		if i > 0 && seg.index != next {
			return 0, 0, gapError(seg, next)
		}
		data, err := d.readFile(seg.path)
		if err != nil {
			return 0, 0, fmt.Errorf("wal: read segment: %w", err)
		}
		sc := scanEntries(data)
		if sc.reason != "" {
			return 0, 0, &CorruptError{
				File:   seg.path,
				Offset: int64(sc.end),
				Index:  seg.index + uint64(sc.count),
				Reason: sc.reason + " (in a segment that is not the last)",
			}
		}
		next, lastBytes = seg.index+uint64(sc.count), len(data)
	}
	return next, lastBytes, nil
}

func gapError(seg segment, want uint64) error {
	return &CorruptError{
		File:   seg.path,
		Offset: 0,
		Index:  seg.index,
		Reason: fmt.Sprintf("segment starts at index %d, want %d", seg.index, want),
	}
}

// cutTail drops the damaged tail of seg at sc.end (removing the file if
// remove is set), makes that durable and reports it.
func (d disk) cutTail(dir string, seg segment, data []byte, sc scan, remove bool, logger *slog.Logger) (RepairReport, error) {
	rep := RepairReport{
		Repaired:       true,
		File:           seg.path,
		Offset:         int64(sc.end),
		TruncatedBytes: int64(len(data) - sc.end),
		DroppedEntries: countFrames(data[sc.end:]),
	}
	var err error
	if remove {
		err = d.fs.Remove(seg.path)
	} else {
		err = d.truncateFile(seg.path, int64(sc.end))
	}
	if err != nil {
		return RepairReport{}, fmt.Errorf("wal: repair tail of %s: %w", seg.path, err)
	}
	if err := d.syncDir(dir); err != nil {
		return RepairReport{}, fmt.Errorf("wal: repair tail of %s: %w", seg.path, err)
	}
	logger.Warn("repaired torn log tail",
		slog.String("file", rep.File),
		slog.Int64("offset", rep.Offset),
		slog.Int64("truncated_bytes", rep.TruncatedBytes),
		slog.Int("dropped_entries", rep.DroppedEntries),
		slog.Bool("removed_file", remove),
		slog.String("reason", sc.reason))
	return rep, nil
}
