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
//   - TestPowerLossAtEveryStep: power-loss images on the crashable model filesystem
//     (unsynced bucket writes dropped, kept as a prefix, or torn).
//   - TestPowerCutExt4: power cuts on a loop-mounted ext4 image (EXT4_IOC_SHUTDOWN).
//   - TestCorruptionBetweenRuns: torn, zero-filled and flipped WAL and bucket files.
//   - TestErrorPaths, TestRealENOSPC: EIO and ENOSPC on every fallible file call; a full
//     tmpfs.
//   - TestRaftNemesis: five Raft replicas in virtual time (testing/synctest) under
//     partitions and crash-restarts, with a porcupine check of the history.
//   - TestProcessNemesis and the cluster tests: three storenode processes with killed,
//     paused and partitioned nodes, recording clients, porcupine.
//   - TestMutants (no tag): plants one bug at a time and requires a tier to catch it.
//
// Invariants checked after each recovery (reliability.md §4): I1 every metadata record reads
// back verified; I2 every acknowledged key is present with its bytes; I3 no read returns
// wrong bytes; I4 no record on disk without metadata; I5 no unresolved WAL intent remains;
// I6 replicas converge; I7 apply is idempotent; I8 the history is linearizable; I12
// live-byte accounting equals the referenced extents.
//
// Nothing imports chaos; it imports anything.
package chaos
