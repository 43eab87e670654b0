// Package mutant plants one known bug at a time, so the mutation check (chaos TestMutants)
// can prove that the test suite is not vacuous: every planted bug must make some tier fail.
//
// In normal builds On is a constant-false function the compiler inlines away, so every
// plant (`if mutant.On(mutant.X) { ... }`, commented "mutation test only") is dead code.
// Built with -tags chaos, On reports whether name equals the KVOFFLOAD_MUTANT environment
// variable (read once): at most one mutant is live per process.
package mutant

// Names of the planted bugs.
const (
	SkipBucketSync   = "skip-bucket-fdatasync"        // bucketstore: report a bucket synced without fdatasync
	CommitBeforeSync = "commit-before-data-synced"    // txn: propose the COMMIT, then fdatasync the records
	SkipReadVerify   = "skip-read-checksum"           // bucketstore: Read returns the payload unverified
	SkipDirSync      = "skip-dir-fsync"               // bucketstore: never fsync the directory
	AcceptTornWAL    = "accept-torn-wal-tail"         // wal: leave a torn tail in place at Open
	DoubleApply      = "apply-duplicate-commit-twice" // fsm: no txn-ID de-duplication for COMMIT
	FreeBeforeRemove = "free-before-removal-applied"  // txn: free a key's bytes before proposing its REMOVE

	// Planted for the crash simulator (chaos/sim), each a bug class peers have shipped.
	PhantomRecord         = "phantom-record-2827"      // txn: a duplicate frees the live copy's bytes (Mooncake #2827)
	RollForwardUnverified = "roll-forward-unverified"  // txn: recovery commits an intent without reading its records
	SkipOrphanCollect     = "skip-orphan-collection"   // txn: recovery neither adopts nor frees a bucket's records
	RemoveAckBeforeCommit = "remove-ack-before-commit" // txn: Remove answers before its REMOVE is committed
	LeakFreedBytes        = "leak-freed-bytes"         // bucketstore: a free leaves its bytes in the live count
	SkipWALDirSync        = "skip-wal-dir-fsync"       // wal: a new segment's directory entry is never fsynced
	SkipWALSync           = "skip-wal-fsync"           // wal: a group commit returns before its fsync
	RemoveNotApplied      = "remove-not-applied"       // fsm: a REMOVE answers Removed but leaves the key live
)

// Env is the environment variable that names the live mutant.
const Env = "KVOFFLOAD_MUTANT"
