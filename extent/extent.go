// Package extent is the one extent type of the store: where a record lies in a bucket file.
// The bucket store hands extents out and writes records at them (bucketstore), the metadata
// records them per key (fsm), the WAL intent names them (txn): all three speak this type
// (bucketstore.Extent and fsm.Extent are aliases of it), so no layer converts one shape into
// another. It imports nothing.
package extent

// Extent is the byte range [Offset, Offset+Length) of bucket file Bucket, in bytes. A record's
// extent is aligned to and padded to 4 KiB (docs/format.md).
type Extent struct {
	Bucket uint32
	Offset int64
	Length int64
}

// End returns the offset just past the extent.
func (e Extent) End() int64 { return e.Offset + e.Length }

// Overlaps reports whether e and o share a byte of one bucket (an empty extent overlaps
// nothing).
func (e Extent) Overlaps(o Extent) bool {
	return e.Bucket == o.Bucket && e.Length > 0 && o.Length > 0 && e.Offset < o.End() && o.Offset < e.End()
}
