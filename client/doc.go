// Package client is the Go transactional client of a kvoffload cluster.
//
// A Client talks gRPC (kvoffload.v1) to any member of the cluster: the members forward what
// they cannot serve themselves, so the client needs no knowledge of leaders or owners. Dial
// probes the addresses in order and uses the first reachable one; when a call finds that
// member unavailable, the client fails over to the next address.
//
// # Exactly-once offloads
//
// BatchOffload sends one batch as one transaction named by a TxnID. When a call ends in a way
// that leaves its outcome unknown (the member became unavailable, the stream broke, a deadline
// fired on the server while the caller's context is still live), the client sends the same
// batch again with the same TxnID to the next member, backing off between attempts, until the
// caller's context ends. The cluster de-duplicates by TxnID and answers a repeated transaction
// with its original results, so the batch takes effect exactly once. One exception: if every
// key of a retried call comes back Failed because the transaction was aborted (the first
// attempt was cut off and the cluster rolled it back, storing nothing), the client retries once
// more with a fresh TxnID. If the context ends first, the error wraps both the context's error
// and ErrIndeterminate: the batch may or may not have been stored.
//
// Begin, Put and Commit stage an explicit transaction on the client and send it as one
// BatchOffload with the transaction's ID; Abort discards it (nothing was sent).
//
// # Chunking
//
// Values travel in chunks of at most Options.ChunkSize bytes (default 1 MiB), so no gRPC
// message ever holds a whole value or batch; the chunks reference the caller's slices rather
// than copying them. BatchGet reassembles each key's chunks and checks the byte count against
// the size the member announced; a short value is reported Unavailable, never returned
// truncated.
//
// # Concurrency
//
// A Client is safe for concurrent use by many goroutines. A Txn is not: one goroutine stages
// and commits it. Values passed to BatchOffload or Put must not be modified until the call
// (or Commit) returns.
//
// # Logging
//
// Options.Logger (nil discards) receives Debug lines for each retry and failover and Warn
// lines when the client switches to a fresh TxnID after an aborted attempt.
package client
