// Package chaos holds kvoffload's crash-recovery harness: workloads whose payloads any
// reader can recompute, invariant checkers, and the tests that kill or power-cut the store
// at every step of the write path and then prove the guarantees still hold.
//
// Tiers so far (run with -tags chaos so the failpoints are compiled in):
//
//   - TestKillAtEveryStep: a child process is SIGKILLed at each write-path step S0..S6
//     (internal/failpoint), then restarted; the checkers run after every recovery.
//   - TestKillAtRandomMoments: SIGKILL at a random moment of a running workload, repeated on
//     the same data directory.
//   - TestKillDuringRecovery: a crash in the middle of recovery, followed by another recovery.
//   - TestPowerLossAtEveryStep: in process, the bucket files live on the crashable model
//     filesystem; at each step the durable state is captured as a power loss would leave it
//     (unsynced bucket writes dropped or torn), and a fresh node recovers from it.
//
// Invariants checked after each recovery (reliability.md §4): I1 every metadata record reads
// back verified; I2 every acknowledged key is present with its bytes; I3 no read returns
// wrong bytes; I4 no record on disk without metadata; I5 no unresolved WAL intent remains;
// I12 live-byte accounting equals the referenced extents.
//
// Nothing imports chaos; it imports anything.
package chaos
