package bucketstore

import "fmt"

// ReserveRun reserves one extent per size, back to back in the open bucket, under one lock:
// a transaction's records then lie in one run that WriteRecords writes with one pwrite per
// MaxRunBytes, instead of one per record (the per-key syscall that bounded small objects,
// docs/benchmarks.md). The run starts at a multiple of WriteAlignment and is padded to one,
// and so is each stretch of it that WriteRecords writes with one pwrite (layout); the records
// inside are packed at Alignment. It reserves all or nothing: when the run does not fit in
// what the open bucket has left, it rolls to a new bucket first; when it cannot be reserved
// at all (the quota, a size over BucketSize, more than a bucket in total), it reserves
// nothing and returns the error, and the caller reserves record by record. Sizes must be
// positive multiples of Alignment.
func (s *Store) ReserveRun(sizes []int64) ([]Extent, error) {
	return s.reserve(sizes)
}

// MaxRunBytes bounds one pwrite of WriteRecords (and the aligned buffer it is encoded in):
// large enough that the device sees large sequential writes, small enough that 64 writers
// hold little memory.
const MaxRunBytes = 8 << 20

// runBufferStep is the granularity of run buffers: a run's buffer is its size rounded up to
// it, so that the buffer pools see at most MaxRunBytes/runBufferStep sizes.
const runBufferStep = 1 << 20

func roundUp(n, step int64) int64 { return (n + step - 1) / step * step }

// RecordWrite is one record for WriteRecords: its reserved extent, header and payload.
type RecordWrite struct {
	Ext     Extent
	Header  Header
	Payload []byte
}

// WriteRecords writes recs like WriteRecord, but records whose extents follow each other in
// one bucket are encoded into one aligned buffer and written with one pwrite per write unit
// of at most MaxRunBytes (a record larger than that is a unit of its own). A unit starts at a
// multiple of WriteAlignment and its pwrite is padded to one; runs split where layout split
// them. It returns one error per record (nil: written, not yet synced); a failed pwrite fails
// every record of its unit, the others go on. recs should be whole ReserveRun reservations in
// extent order (ReserveRun gives them so); runs form only between neighbours, and a unit that
// does not start at a multiple of WriteAlignment, or whose padding holds another live extent,
// fails (it would overwrite a neighbour's bytes).
func (s *Store) WriteRecords(recs []RecordWrite) []error {
	errs := make([]error, len(recs))
	for start := 0; start < len(recs); {
		end, size := start+1, recs[start].Ext.Length
		for end < len(recs) {
			prev, next := recs[end-1].Ext, recs[end].Ext
			if next.Bucket != prev.Bucket || next.Offset != prev.End() ||
				(next.Offset%WriteAlignment == 0 && splitsBefore(size, next.Length)) {
				break
			}
			size += next.Length
			end++
		}
		s.writeRun(recs[start:end], errs[start:end])
		start = end
	}
	return errs
}

// writeRun writes recs, consecutive extents of one bucket, with one pwrite; errs[i] is set
// for every record that was not written.
func (s *Store) writeRun(recs []RecordWrite, errs []error) {
	if len(recs) == 1 {
		errs[0] = s.WriteRecord(recs[0].Ext, recs[0].Header, recs[0].Payload)
		return
	}
	fail := func(err error) {
		for i := range errs {
			errs[i] = err
		}
	}
	b, err := s.writableRun(recs)
	if err != nil {
		fail(err)
		return
	}
	first := recs[0].Ext
	size := recs[len(recs)-1].Ext.End() - first.Offset
	padded := alignUp(size, WriteAlignment)
	full := getBuffer(int(roundUp(padded, runBufferStep))) // a few sizes, so the pools are reused
	defer putBuffer(full)
	buf := full[:padded]
	for i, r := range recs {
		off := r.Ext.Offset - first.Offset
		if n := RecordSize(len(r.Header.Key), len(r.Payload)); n != r.Ext.Length {
			errs[i] = fmt.Errorf("bucketstore: record needs %d bytes, extent %+v has %d", n, r.Ext, r.Ext.Length)
		} else {
			errs[i] = EncodeRecord(buf[off:off+r.Ext.Length], r.Header, r.Payload)
		}
		if errs[i] != nil {
			clear(buf[off : off+r.Ext.Length]) // an unencodable record is written as zeros: it reads as no record
		}
	}
	clear(buf[size:])
	if err := s.writeUnit(b, buf, first.Offset, fmt.Sprintf("%d records at %+v", len(recs), first)); err != nil {
		fail(err)
	}
}

// writableRun checks, under one lock, that every extent of recs is live and reserved in one
// fresh bucket and that they form a write unit (writeUnitLocked), and returns the bucket.
func (s *Store) writableRun(recs []RecordWrite) (*bucket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucketLocked(recs[0].Ext.Bucket)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if !b.fresh || r.Ext.Bucket != b.id || b.live[r.Ext.Offset] != r.Ext.Length {
			return nil, fmt.Errorf("bucketstore: write %+v: not a live extent reserved by this store", r.Ext)
		}
	}
	first, last := recs[0].Ext, recs[len(recs)-1].Ext
	return b, writeUnitLocked(b, Extent{Bucket: b.id, Offset: first.Offset, Length: last.End() - first.Offset})
}
