// Package sim is kvoffload's crash simulator: the store's real write path (txn's
// coordinator, the intent WAL, the bucket store and the FSM) runs in one process on a
// simulated disk (vfs/memfs), and one seed chooses the workload, the moment of each power
// loss and what the loss leaves. Each run of a seed is a chain of crashes: the world runs
// until the power fails at a chosen persistence point, a new world recovers from what the
// disk and the Raft log held at that instant, every invariant is checked, and the
// recovered world runs on until the next power loss (which may strike during recovery).
//
// The simulated disk. Every file of the node lives on one memfs.FS behind a vfs/errorfs
// injector. A persistence point is each write, sync, directory sync, rename, removal,
// truncate and hole punch the store asks of the disk, and each Raft append (a COMMIT,
// ABORT or REMOVE reaching the log). At the chosen point, memfs.Crash builds the disk a
// power loss leaves, in one of four modes drawn from the seed: unsynced changes all lost,
// a prefix of them kept per file, a random subset kept with the last write torn at a
// 512-byte sector (in these three, created, removed and renamed names survive only if their
// directory was synced), or what ext4 with data=ordered could leave (a prefix of the
// journaled metadata since the last commit, overwrites per 4 KiB page, appends as a whole
// prefix; memfs.CrashExt4Ordered). After the point every operation fails (the power is
// off), so nothing the world does afterwards reaches the image.
//
// The Raft log. A single node's metadata is the FSM applied from its Raft log, which
// raft-boltdb fsyncs before an entry is applied. The simulator keeps that log as a list of
// commands: a Propose appends its command and applies it in log order. A power loss at a
// Raft append keeps the entry or not (both happen on a real disk: the fsync may complete
// before the loss while the answer never returns). Recovery applies the kept log to a
// fresh FSM.
//
// The invariants, checked after every recovery against a model of what was acknowledged
// (docs/chaos.md, "Invariants and checkers"): I1 every live metadata entry reads back
// verified; I2 every key whose last acknowledged operation stored it reads back with its
// bytes; I3 no read returns wrong bytes; no resurrection: a key whose last acknowledged
// operation removed it is absent; I4 every record on the disk is referenced by metadata;
// I5 no WAL intent is left unresolved; I12 the bucket store's live bytes equal the bytes
// metadata references. A key with an operation in flight at the loss may be either way,
// but never wrong.
//
// Other faults, from the seed: a Raft answer lost after its entry committed, a member's FSM
// lagging behind a retried transaction, client retries with the txn ID, a bit flipped at
// rest, EIO on a bucket fdatasync (the file loses its unsynced writes) or a WAL write (the
// node fail-stops and restarts), a full disk, short writes of buckets and the WAL, and EIO
// or a flipped bit on a client's bucket read (an error or Corrupt, never wrong bytes). Coverage guidance focuses seeds on the
// persistence point signatures crashed least (TestSimulate). docs/chaos.md, "The crash
// simulator", has the fault table and each planted bug's catch.
//
// Determinism. The seed fixes the workload, the crash points and modes, every fault and the
// txn IDs. Each seed runs in a testing/synctest bubble (virtual time), and with one P and no
// asynchronous preemption (scripts/sim.sh sets GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1) the
// coordinator's goroutines interleave the same way on every run: scripts/sim.sh --seed S
// replays a seed (TestSeedReplays).
package sim
