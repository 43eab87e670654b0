// Package node wires one kvoffload node: its data directory, WAL, buckets, Raft metadata and
// transaction coordinator. Open runs recovery before it returns, so a returned Node serves
// every committed key again (warm restart, G6).
//
// Data directory layout:
//
//	DIR/LOCK      exclusive flock: one process per data directory
//	DIR/wal/      intent log (tidwall/wal segments in the kvoffload envelope)
//	DIR/buckets/  bucket files of self-describing records
//	DIR/raft/     raft.db (raft-boltdb/v2 log and stable store) and snapshots/
package node
