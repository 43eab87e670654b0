package node

import (
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kvoffload/kvoffload/raftmeta"
	"github.com/kvoffload/kvoffload/wal"
)

// The space reserve (docs/operations.md, "Space"): the bytes of the data filesystem that
// bucket files never take, so that the WAL, the Raft log and its snapshots can always be
// written. An offload the data space has no room for is Rejected per key with CodeNoSpace
// (bucketstore.DiskFullError names the free bytes and the reserve), while reads, BatchExists,
// Remove, eviction and Leave, which write only to the WAL and the Raft log, go on. The
// formula, in bytes:
//
//	reserve = 2 x WAL segment                                  (the tail segment, and the copy of the segment TruncateFront cuts)
//	        + (SnapshotThreshold + TrailingLogs) x raftEntryBytes   (the entries raft.db holds between compactions)
//	        + (SnapshotRetain + 1) x (largest snapshot + SnapshotThreshold x raftEntryBytes)
//	                                                           (the snapshots kept, the one being written, each grown by the entries since)
//
// The snapshot term follows the metadata: it is measured from the snapshots on disk every
// spaceReserveEvery.
const (
	// raftEntryBytes is the size the reserve assumes for one Raft log entry in raft.db: the
	// commit of a batch of about 32 keys of 100 bytes, with bolt's page overhead.
	raftEntryBytes = 4 << 10
	// spaceReserveEvery is how often the reserve is measured again.
	spaceReserveEvery = time.Second
)

// SpaceReserve is the reserve, in bytes, of a node whose Raft log compacts at
// snapshotThreshold entries keeping trailingLogs (0: raftmeta's defaults) and whose largest
// snapshot on disk is snapshotBytes (see the formula above).
func SpaceReserve(snapshotThreshold, trailingLogs uint64, snapshotBytes int64) int64 {
	if snapshotThreshold == 0 {
		snapshotThreshold = raftmeta.DefaultSnapshotThreshold
	}
	if trailingLogs == 0 {
		trailingLogs = raftmeta.DefaultTrailingLogs
	}
	walBytes := 2 * int64(wal.DefaultSegmentSize)
	logBytes := int64(snapshotThreshold+trailingLogs) * raftEntryBytes
	snapBytes := int64(raftmeta.DefaultSnapshotRetain+1) * (snapshotBytes + int64(snapshotThreshold)*raftEntryBytes)
	return walBytes + logBytes + snapBytes
}

// spaceReserve is this node's reserve in bytes: Config.SpaceReserve when set (negative:
// none), else SpaceReserve over the snapshots in its Raft directory, at most
// maxReserveShare of the data filesystem's size: on a small filesystem the formula's fixed
// terms (WAL segments, a full Raft log) would leave no room for data, and the few entries a
// small node's log holds need far less; past the reserve, a Raft log that cannot be written
// fail-stops the node saying so.
func (n *Node) spaceReserve() int64 {
	if r := n.cfg.SpaceReserve; r != 0 {
		return max(r, 0)
	}
	r := SpaceReserve(n.cfg.SnapshotThreshold, n.cfg.TrailingLogs, largestSnapshot(filepath.Join(n.cfg.DataDir, "raft", "snapshots")))
	var st syscall.Statfs_t
	if err := syscall.Statfs(n.cfg.DataDir, &st); err == nil && st.Bsize > 0 {
		r = min(r, int64(st.Blocks)*st.Bsize/maxReserveShare)
	}
	return r
}

// maxReserveShare: a computed reserve takes at most 1/maxReserveShare of the data
// filesystem's size.
const maxReserveShare = 4

// largestSnapshot returns the size in bytes of the largest snapshot in dir (raft's
// FileSnapshotStore: one directory per snapshot, holding state.bin), 0 if there is none.
func largestSnapshot(dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var most int64
	for _, e := range entries {
		if fi, err := os.Stat(filepath.Join(dir, e.Name(), "state.bin")); err == nil {
			most = max(most, fi.Size())
		}
	}
	return most
}

// spaceLoop runs for the node's life: it measures the reserve again every spaceReserveEvery
// and gives it to the bucket store.
func (n *Node) spaceLoop() {
	t := time.NewTicker(spaceReserveEvery)
	defer t.Stop()
	for {
		select {
		case <-n.closing:
			return
		case <-t.C:
		}
		n.buckets.SetReserve(n.spaceReserve())
	}
}

// warnSpace logs, at open, a data filesystem that has less free than the reserve: every
// offload is refused (CodeNoSpace) until space is freed.
func (n *Node) warnSpace() {
	st, err := n.buckets.Stats()
	if err != nil || st.FreeBytes < 0 || st.FreeBytes >= st.Reserve {
		return
	}
	n.log.Warn("the data filesystem has less free space than the reserve for the WAL and the Raft log: every offload is refused (no space) until space is freed or the reserve lowered (Config.SpaceReserve, docs/operations.md)",
		"free_bytes", st.FreeBytes, "reserve_bytes", st.Reserve, "dir", n.cfg.DataDir)
}

// raftLogFault fail-stops the node once raft.db cannot be written (raftmeta.Config.OnLogFault):
// Raft has stopped, so every call is refused at once, naming the Raft log, and Healthy says
// so (raftmeta.Node.LogFault) even before the coordinator exists.
func (n *Node) raftLogFault(err error) {
	select {
	case <-n.ready:
		n.coord.FailStop(err)
		return
	default:
	}
	go func() { // still opening: the coordinator fail-stops once it exists, unless Open fails first
		select {
		case <-n.ready:
			n.coord.FailStop(err)
		case <-n.closing:
		}
	}()
}
