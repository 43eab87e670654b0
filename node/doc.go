// Package node wires one kvoffload node: its data directory, WAL, buckets, Raft metadata and
// transaction coordinator. Open runs recovery before it returns, so a returned Node serves
// every committed key again (warm restart, G6).
//
// Open is a sequence of steps (node.go): newNode builds the node, openStores opens the data
// directory, then the steps of the mode run, startEmbedded for a single node or startMember
// for a cluster member (member.go); Config.cluster is the one test of the mode. A member
// opens its cluster ID, Raft, the coordinator and both listeners, then decides from its Raft
// state whether it joins, restarts as a member or was removed (cluster.Member.Start), and
// runs recovery. Membership, cluster and node identity, peer security and the Cluster
// service are internal/cluster; a member's coordinator reaches the Raft leader and the
// owners of other keys through internal/forward; the event stream is internal/watch.
//
// Go Ps: the store's goroutines spend milliseconds in blocking fsync, fdatasync and O_DIRECT
// write calls, and each keeps its P (GOMAXPROCS) until the runtime retakes it, up to 10 ms
// later (golang/go#18236). A program that embeds a node on 2 or fewer cores should run with
// GOMAXPROCS=4, as storenode does (64-byte commits ~25% faster on 2 cores; Open logs a hint
// below 4; docs/operations.md).
//
// Data directory layout (each subdirectory's own is its package's doc):
//
//	DIR/LOCK        exclusive flock: one process per data directory
//	DIR/CLUSTER_ID  a member's cluster ID; DIR/NODE_ID: the node ID the directory belongs to.
//	                Each is one line, the ID and "\n" (1 to 255 bytes without it), written
//	                through NAME.tmp, fsync, rename and a directory fsync, and not again
//	                while it holds the same ID (internal/cluster/identity.go)
//	DIR/wal/        intent log: tidwall/wal segments of kvoffload envelopes (wal/doc.go)
//	DIR/buckets/    bucket-%010d.kvb files of self-describing records, and the bucket
//	                store's LOCK (bucketstore/doc.go)
//	DIR/raft/       raft.db (raft-boltdb/v2 log and stable store) and snapshots/
//	                (raftmeta/doc.go)
package node
