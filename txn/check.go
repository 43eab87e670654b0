package txn

import "github.com/kvoffload/kvoffload/bucketstore"

// MaxRecordLen is the extent length of the largest object this configuration accepts: the
// record of a MaxObjectBytes payload under a MaxKeyBytes key, header and padding included
// (bucketstore.RecordSize), and never more than the format's bucketstore.MaxRecordLen. The
// leader refuses a forwarded COMMIT naming a longer extent (fsm.FSM.CheckCommit).
func (c Config) MaxRecordLen() int64 {
	if c.MaxObjectBytes > bucketstore.MaxPayloadLen || c.MaxKeyBytes > bucketstore.MaxKeyLen {
		return bucketstore.MaxRecordLen
	}
	return bucketstore.RecordSize(c.MaxKeyBytes, int(c.MaxObjectBytes))
}
