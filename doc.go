// Package kvoffload is the one Go API of kvoffload, a write-ahead-logged, transactional offload
// store for KV-cache blocks: the Store interface and the types every implementation speaks.
//
// Three implementations satisfy Store with the same types, the same validation and the same
// errors:
//
//   - node.Node, an embedded node (a single-node store, or a member of a cluster) running in
//     the caller's process;
//   - client.Client, the remote client of a cluster of storenode processes (gRPC, any member
//     as the entry point, failover, exactly-once retries);
//   - fake.Store, an in-memory store for the tests of code that uses kvoffload.
//
// storetest.Run is the conformance suite all three pass.
//
// # Results and errors
//
// The batch calls answer per key: a key that cannot be stored or read is a result (an
// Outcome or GetStatus with a Code and a Reason), never an error of the whole call. A call
// returns an error only when it could not answer for its keys at all; the error wraps one of
// the sentinels below (and the context's error when the context ended). docs/api.md has the
// table of which call returns which, and how to retry.
//
// Code is the machine-readable reason of a result: KeyResult.Err and GetResult.Err return an
// error that matches its Code with errors.Is, and unwraps to a *KeyError with errors.As:
//
//	for _, r := range results {
//		switch err := r.Err(); {
//		case err == nil: // stored
//		case errors.Is(err, kvoffload.CodeQuota): // the store is full: evict, or wait
//		case errors.Is(err, kvoffload.CodeAborted): // resend under a fresh TxnID
//		}
//	}
package kvoffload
