// Package chaos holds kvoffload's crash-recovery harness: workloads whose payloads any
// reader can recompute, invariant checkers, and the tests that kill or power-cut the store
// at every step of the write path and then prove the guarantees still hold.
//
// Tiers (run with -tags chaos so the failpoints are compiled in; docs/chaos.md has the
// fault table, the invariants, the mutation check and the bugs found):
//
//   - TestKillAtEveryStep, TestKillAtRandomMoments, TestKillDuringRecovery: SIGKILL of a
//     child process at each write-path failpoint S0..S6, at random moments, and during
//     recovery.
//   - TestTornRecordWrite: half a bucket record written, then SIGKILL (failpoint bucket.write).
//   - TestPowerLossAtEveryStep: power-loss images on the crashable model filesystem
//     (unsynced bucket writes dropped, kept as a prefix, or torn).
//   - TestKillDuringEviction, TestPowerLossDuringEviction: SIGKILL and power loss at each
//     eviction step (evict.chosen, bucket.free, evict.removed) under a quota.
//   - TestPowerCutExt4 (L3): power cuts on a loop-mounted ext4 image (EXT4_IOC_SHUTDOWN).
//   - TestCorruptionBetweenRuns (L4): torn, zero-filled and flipped WAL and bucket files.
//   - TestErrorPaths (L5), TestRealENOSPC: EIO and ENOSPC on every fallible file call; a
//     full tmpfs.
//   - TestRaftNemesis (L6): five Raft replicas in virtual time (testing/synctest) under
//     partitions and crash-restarts, with a porcupine check of the history.
//   - TestProcessNemesis (L7) and the cluster tests: three storenode processes with killed,
//     paused and partitioned nodes, recording clients, porcupine.
//   - TestStalledMemberWriters: 32 writers while a follower is paused for 8 s; every writer
//     keeps committing (its client leaves the paused member after StallTimeout).
//   - TestPausedLeaderWriters: 6 writers spread over the members while the leader is paused
//     for about 6 s; no batch running during the pause takes more than 3 s.
//   - TestAttackTier: peer RPCs on the API ports, without or with a foreign certificate, and
//     forged commands with a member's certificate, on a TLS cluster.
//   - TestCrossedClusters: a node of one cluster started on another's addresses and joined to
//     it; every key stays in its cluster.
//   - TestWatchThroughFaults: event-stream consumers through a leader kill, a cut-off
//     follower and a log compacted into a snapshot, checked against the writers' history.
//   - TestMutants (no tag): plants one bug at a time and requires a tier to catch it.
//
// Invariants checked after each recovery (docs/chaos.md, "Invariants and checkers"): I1 every
// metadata record reads back verified; I2 every acknowledged key is present with its bytes;
// I3 no read returns wrong bytes; I4 no record on disk without metadata; I5 no unresolved WAL
// intent remains; I6 replicas converge; I7 apply is idempotent; I8 the history is
// linearizable; I9 the applied index never goes backwards; I12 live-byte accounting equals
// the referenced extents.
//
// Nothing imports chaos; it imports anything.
package chaos
