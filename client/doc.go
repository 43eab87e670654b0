// Package client is the Go transactional client of a kvoffload cluster: a kvoffload.Store
// (the one API, docs/api.md) that reaches the cluster over gRPC.
//
// A Client talks gRPC (the KVOffload service of kvoffload.v1, on the members' API listeners;
// never the peer-only Cluster service) to any member of the cluster: the members forward what
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
// more with a fresh TxnID (the results say CodeAborted; the client reads the code, never the
// text). If the context ends first, the error wraps both the context's error and
// kvoffload.ErrIndeterminate: the batch may or may not have been stored. A call whose context
// has no deadline gets Options.CallTimeout (30 s by default), so a call to a cluster that is
// down returns.
//
// # Stalled members
//
// A member can stop answering without closing its connections (SIGSTOP, a long GC pause, a
// frozen VM): no error ever arrives. Each attempt therefore runs under a stall watch: an
// attempt that makes no progress for Options.StallTimeout (default 2 s) is cancelled and
// retried on the next member like Unavailable, with the same TxnID. Progress is a message
// received, a message the transport accepted for sending, or an answer from the member to a
// gRPC health check (grpc.health.v1.Health/Check) that the client sends on the same
// connection while the attempt has been idle for half of StallTimeout; any answer counts,
// Unimplemented included, so the member need not register the health service. A live member
// that takes long (a large fdatasync, a Raft election) keeps its calls; the total time of an
// attempt is bounded only by the caller's context. gRPC keepalive pings (every 10 s of
// silence, grpc-go's minimum; unanswered after StallTimeout, the connection is closed) also
// close idle connections to such a member. The server must permit them: its
// keepalive.EnforcementPolicy needs MinTime at most 10 s and PermitWithoutStream true.
//
// # Refusals and invalid keys
//
// A member that has fail-stopped or was removed from the cluster refuses every call with gRPC
// Unavailable carrying an ErrorInfo (reason FAIL_STOPPED or NODE_REMOVED): nothing of the call
// was done there, and the client never sends it to that member again. The call moves to the
// next member at once, without a backoff; when every member has refused it, it returns
// kvoffload.ErrUnavailable naming the refusal at once (an offload whose earlier attempt left
// its outcome unknown: kvoffload.ErrIndeterminate).
//
// A request the cluster refused (gRPC InvalidArgument, ResourceExhausted, PermissionDenied,
// Unauthenticated, or FailedPrecondition other than "not the leader") is returned at once
// with kvoffload.ErrInvalidArgument, ErrTooLarge or ErrDenied, never retried; a read, an
// existence check or a Remove that gives up returns kvoffload.ErrUnavailable. A key that
// kvoffload.CheckKey refuses (empty, not valid UTF-8, a control character: the protocol's
// keys are proto3 strings, and an empty key would read as a continuation chunk) is answered
// per key by the client without being sent, as every Store answers it: Rejected with
// CodeInvalidKey by BatchOffload, InvalidKey by BatchGet, Absent by BatchExists, Removed false
// by Remove; the other keys of the call are sent as usual.
//
// # Credentials
//
// Options.TLS secures the connections; Options.Token sends a bearer token with every call
// ("authorization: Bearer <token>", RFC 6750), and requires TLS unless Options.InsecureToken
// is set.
//
// Begin, Put and Commit stage an explicit transaction on the client and send it as one
// BatchOffload with the transaction's ID; Abort discards it (nothing was sent).
//
// # The local path and the precheck
//
// A member addressed "unix://PATH" (a node's --local-socket on this host) is reached over
// that Unix socket, and values move through shared-memory regions instead of gRPC messages:
// the Store calls copy through pooled staging regions, and NewRegion, OffloadFrom and GetInto
// let a caller fill and read a region in place (docs/design.md "The local path").
//
// Before uploading a batch, the client asks the member once which keys it already stores
// with the same size and checksum (KVOffload.Precheck, one round trip, the xxhash64 of each
// value computed by the client): those are answered AlreadyStored and their payloads are
// not sent; the rest go as the batch, under the call's TxnID. The answer is decided once per
// call, before anything is uploaded, so every retry sends the same batch. Options.NoPrecheck
// turns it off; a member that predates Precheck (Unimplemented) is remembered and skipped.
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
// Options.Logger (nil discards) receives Debug lines for each retry and failover (a stalled
// attempt included) and Warn lines when the client switches to a fresh TxnID after an
// aborted attempt. Options.OnAttempt is the metrics hook: it sees every attempt's operation,
// member, duration and error. Options.GRPCOptions passes dial options through (interceptors,
// a dialer, stats handlers). The zero Options is usable: zero fields take their defaults.
package client
