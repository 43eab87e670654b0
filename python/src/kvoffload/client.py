"""The Python client of a kvoffload cluster, with the Go client's semantics (client/ in this
repository; docs/api.md):

- any member is an entry point; the others are failover targets;
- an attempt whose outcome is unknown (UNAVAILABLE, DEADLINE_EXCEEDED from the member,
  ABORTED, CANCELLED, a stream cut before the reply was complete, FAILED_PRECONDITION "not
  the leader") is sent again, with the same txn ID, to the next member after a jittered
  backoff, until the call's deadline (default 30 s) or max_attempts; only then
  IndeterminateError (batch_offload) or UnavailableError (other calls) is raised;
- a member's refusal (it fail-stopped or was removed: _refusal.py) is final for that member:
  the call moves to the next member at once, and UnavailableError naming the refusal is
  raised at once when every member has refused;
- when a retried batch_offload finds every key Failed with Code.ABORTED (the lost attempt was
  rolled back, storing nothing), the batch is sent once more under a fresh txn ID
  (client/offload.go batchOffload);
- per-key problems are results with a typed Code; keys that check_key refuses are answered by
  the client and not sent; the call-level limits (MaxBatchKeys 4096, MaxBatchBytes 1 GiB)
  raise TooLargeError before anything is sent.

Values travel in chunks of at most 1 MiB (api/kvoffload/v1/kvoffload.proto): an object
starts with a chunk carrying its key and size, the first message carries the txn ID.

A member addressed "unix:///PATH" (a node's --local-socket) is reached over gRPC on that
Unix socket and, for batch_offload, batch_get and batch_get_into, through the shared-memory
path (local.py; docs/design.md "The local path"): values are copied into a staging region
registered with the node and the calls carry descriptors. The zero-copy API is new_region,
offload_from and get_into_region (Go Client.NewRegion, OffloadFrom, GetInto).

Differences from the Go client: there is no per-attempt stall watch (client/stall.go); a
member that stops answering while its connection stays open is found by gRPC keepalive
(stall_timeout is the keepalive timeout, pings every 10 s) or by the call's deadline. There is
no Precheck (client/offload.go precheck) before an upload.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union

import grpc

from . import _refusal
from . import errors as E
from .local import MAX_STAGING_BYTES, Region, _Registrar, _Staging, local_path
from .types import (
    CHUNK_BYTES,
    MAX_BATCH_BYTES,
    MAX_BATCH_KEYS,
    MAX_KEY_BYTES,
    MAX_OBJECT_BYTES,
    ClusterStatus,
    Code,
    ExistsResult,
    GetResult,
    GetStatus,
    KeyResult,
    Member,
    Outcome,
    Presence,
    RemoveResult,
    Stats,
    TxnID,
    check_key,
    code_of,
    leading_present,
    new_txn_id,
)
from .v1 import kvoffload_pb2 as pb
from .v1 import kvoffload_pb2_grpc as pbg

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# The gRPC message limit: the largest message a call of MAX_BATCH_KEYS keys of MAX_KEY_BYTES
# needs, besides one chunk (internal/wire/limits.go MaxMessageBytes, the limit of the Go client
# and of the members).
_MESSAGE_BYTES = (
    MAX_BATCH_KEYS * max(2 * MAX_KEY_BYTES + 128 + 255, MAX_KEY_BYTES + 1024 + 64) + CHUNK_BYTES + (1 << 20)
)
# The largest size a member may announce for one value (client/get.go maxValueBytes).
_MAX_VALUE_BYTES = 64 << 20
# The smallest keepalive interval grpc servers of this project permit (client/client.go).
_KEEPALIVE_MS = 10_000
# The room a local BatchGet first gives each key before any value was seen (client/client.go
# minValueHint).
_MIN_VALUE_HINT = 64 << 10

Buffer = Union[bytearray, memoryview, Any]  # anything exporting a writable buffer (numpy)
Value = Union[bytes, bytearray, memoryview, Any]


class _StreamEnded(Exception):
    """An attempt whose reply was incomplete: retried (client/retry.go errStreamEnded)."""


class _Renew(Exception):
    """Run the operation again at once (the batch switched to a fresh txn ID)."""


class _LostRegion(_StreamEnded):
    """The node no longer knows a staging region (its registration connection broke: a
    restart); the attempt's outcome is unknown and it is retried with a new region
    (client/local.go retryLost)."""


class _Local:
    """The shared-memory side of a member on a node's local socket (client/local.go
    localMember): its LocalKVOffload stub and the staging regions the calls copy through."""

    def __init__(self, path: str, ch: grpc.Channel):
        self.path = path
        self.stub = pbg.LocalKVOffloadStub(ch)
        self.staging = _Staging(_Registrar(path))


# What answered at an address that could not be connected, from grpc's own words for the
# connection's last error (grpc core's subchannel and resolver messages), as the Go client
# says it (internal/transport/answered.go WhatAnswered).
_ANSWERED = (
    ("DNS resolution failed", "the host does not resolve"),
    ("Connection refused", "nothing listens there"),
    ("http1.x server", "an HTTP server answers there (a member's --http-addr?)"),
    ("Socket closed", "a server there closes a plaintext connection without a word: it expects TLS (pass tls=), or it is a member's --raft-addr"),
    ("ssl", "the TLS handshake failed (a server without TLS, or a certificate the CA did not sign)"),
)


def _what_answered(stub) -> str:
    """Asks once more without waiting for the connection, and names what answered."""
    try:
        stub.Status(pb.StatusRequest(), timeout=1.0)
        return "connected late"
    except grpc.RpcError as e:
        details = e.details() or ""
    except Exception as e:  # noqa: BLE001 - only for the message
        details = str(e)
    for needle, what in _ANSWERED:
        if needle.lower() in details.lower():
            return f"{what}: {details}"
    return details or "connection failed"


def _lost(err: grpc.RpcError) -> bool:
    return (hasattr(err, "code") and err.code() == grpc.StatusCode.PERMISSION_DENIED
            and "is not registered by this client" in (err.details() or ""))


def _on_region(r: Region, renew: bool, call: Callable[[Any], Any]) -> Any:
    """call(r's reference); when the node does not know r (it restarted) and renew is set (a
    caller's region, not a staging one), r is registered again and call runs once more."""
    ref = r.ref()
    try:
        return call(ref)
    except grpc.RpcError as e:
        if not renew or not _lost(e) or not r.renew(ref.id):
            raise
    return call(r.ref())


def _byteview(v: Any, writable: bool = False) -> memoryview:
    mv = v if isinstance(v, memoryview) else memoryview(v)
    if writable and mv.readonly:
        raise E.InvalidArgumentError("buffer is read-only")
    if not mv.c_contiguous:
        raise E.InvalidArgumentError("buffer is not C-contiguous")
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


class Client:
    """A connection to a kvoffload cluster through any of its members; safe for use from
    many threads.

    addrs: host:port of members' API listeners (--api-addr); the first that connects within
    dial_timeout is used, the others are failover targets.
    timeout: the deadline of a call that is not given one (seconds; Go CallTimeout, 30 s).
    tls: None (plaintext), a grpc.ChannelCredentials, or root certificates (PEM bytes) of the
    cluster's CA (storenode certs). token: a bearer token sent with every call
    ("authorization: Bearer <token>"); it requires tls unless insecure_token is True.

    An address "unix:///PATH" (or "unix:PATH") is a node's --local-socket on this host: gRPC
    goes over that socket and batch_offload / batch_get / batch_get_into move values through
    shared memory registered on it (docs/design.md "The local path"). local: None (default)
    uses the shared-memory path for unix:// members and streams over the socket when no
    region can be had (the node refused it: its limits; logged); True requires it (every
    address must be unix://, and a refused region raises its error); False never uses it
    (gRPC streams over the socket).
    """

    def __init__(
        self,
        addrs: Union[str, Sequence[str]],
        *,
        timeout: float = 30.0,
        dial_timeout: float = 2.0,
        retry_backoff: float = 0.05,
        max_backoff: float = 2.0,
        max_attempts: int = 0,
        stall_timeout: float = 2.0,
        chunk_size: int = CHUNK_BYTES,
        tls: Union[None, bytes, grpc.ChannelCredentials] = None,
        token: Optional[str] = None,
        insecure_token: bool = False,
        channel_options: Sequence[Tuple[str, Any]] = (),
        on_attempt: Optional[Callable[[str, str, int, float, Optional[BaseException]], None]] = None,
        local: Optional[bool] = None,
    ):
        if isinstance(addrs, str):
            addrs = [a for a in addrs.split(",") if a]
        addrs = list(addrs)
        if not addrs:
            raise E.InvalidArgumentError("client: no address")
        if not 1 <= chunk_size <= CHUNK_BYTES:
            raise E.InvalidArgumentError(f"client: chunk_size {chunk_size} out of range [1, {CHUNK_BYTES}]")
        if timeout is not None and timeout <= 0:
            raise E.InvalidArgumentError("client: timeout must be positive (or None for no deadline)")
        if max_attempts < 0:
            raise E.InvalidArgumentError(f"client: max_attempts {max_attempts} < 0")
        if token and tls is None and not insecure_token:
            raise E.InvalidArgumentError(
                "client: token without tls would be sent in plaintext; set tls, or insecure_token on purpose")
        self._timeout = timeout
        self._backoff = retry_backoff
        self._max_backoff = max(max_backoff, retry_backoff)
        self._max_attempts = max_attempts
        self._chunk = chunk_size
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        self._on_attempt = on_attempt
        self._lock = threading.Lock()
        self._closed = False
        self._require_local = local is True
        self._value_hint = _MIN_VALUE_HINT
        opts = [
            ("grpc.max_send_message_length", _MESSAGE_BYTES),
            ("grpc.max_receive_message_length", _MESSAGE_BYTES),
            ("grpc.keepalive_time_ms", _KEEPALIVE_MS),
            ("grpc.keepalive_timeout_ms", int(stall_timeout * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            # One connection per client, not one shared with every client of the process.
            ("grpc.use_local_subchannel_pool", 1),
        ] + list(channel_options)
        if isinstance(tls, (bytes, bytearray)):
            tls = grpc.ssl_channel_credentials(root_certificates=bytes(tls))
        self._members: List[Tuple[str, grpc.Channel, pbg.KVOffloadStub]] = []
        self._local: List[Optional[_Local]] = []
        for a in addrs:
            path = local_path(a)
            if local is True and not path:
                raise E.InvalidArgumentError(f"client: local=True but {a!r} is not a unix:// address (a node's --local-socket)")
            if not path and "://" not in a and not a.rpartition(":")[2].isdigit():
                raise E.InvalidArgumentError(f"client: address {a!r} is not host:port (a member's --api-addr, port included)")
            if path:
                if not path.startswith("/"):
                    raise E.InvalidArgumentError(f"client: {a!r}: the socket path must be absolute (unix:///PATH)")
                if tls is not None:
                    raise E.InvalidArgumentError(f"client: {a!r}: the local socket has no TLS (docs/security.md); drop tls")
                # grpc's name syntax (doc/naming.md in grpc/grpc): unix:///ABSOLUTE_PATH.
                ch = grpc.insecure_channel("unix://" + path, options=opts)
            else:
                ch = grpc.secure_channel(a, tls, options=opts) if tls is not None else grpc.insecure_channel(a, options=opts)
            self._members.append((a, ch, pbg.KVOffloadStub(ch)))
            self._local.append(_Local(path, ch) if path and local is not False else None)
        errs = []
        for i, (a, ch, _) in enumerate(self._members):
            try:
                grpc.channel_ready_future(ch).result(timeout=dial_timeout)
                self._cur = i
                return
            except grpc.FutureTimeoutError:
                errs.append(f"{a}: {_what_answered(self._members[i][2])} (not connected after {dial_timeout} s)")
        self._close_channels()
        raise E.UnreachableError("client: no member reachable: " + "; ".join(errs))

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def addr(self) -> str:
        """The address calls currently go to."""
        return self._members[self._cur][0]

    def close(self) -> None:
        """Closes the connections; later calls raise ClosedError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._close_channels()

    def _close_channels(self) -> None:
        for lm in self._local:
            if lm is not None:
                lm.staging.close()
        for _, ch, _ in self._members:
            ch.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- retry -------------------------------------------------------------------------

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        t = self._timeout if timeout is None else timeout
        return None if t is None else time.monotonic() + t

    def _failover(self, i: int) -> None:
        with self._lock:
            if self._cur == i:
                self._cur = (i + 1) % len(self._members)

    def _serving(self, refused: set) -> Optional[int]:
        """The member the next attempt goes to: the current one, or the next after it that
        has not refused this call; None when every member has (client/retry.go serving)."""
        with self._lock:
            cur = self._cur
        for k in range(len(self._members)):
            i = (cur + k) % len(self._members)
            if i not in refused:
                return i
        return None

    @staticmethod
    def _retryable(err: BaseException) -> bool:
        if isinstance(err, _StreamEnded):
            return True
        if not isinstance(err, grpc.RpcError) or not hasattr(err, "code"):
            return False
        c = err.code()
        if c in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                 grpc.StatusCode.ABORTED, grpc.StatusCode.CANCELLED):
            return True
        if c in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
            return "error while marshaling" not in (err.details() or "") and "Exception serializing" not in (err.details() or "")
        if c == grpc.StatusCode.FAILED_PRECONDITION:
            return "not the leader" in (err.details() or "")
        return False

    @staticmethod
    def _permanent(name: str, err: BaseException) -> E.KVOffloadError:
        if isinstance(err, E.KVOffloadError):
            return err
        c = err.code() if isinstance(err, grpc.RpcError) and hasattr(err, "code") else None
        details = err.details() if c is not None else str(err)
        msg = f"{name}: {c.name if c else type(err).__name__}: {details}"
        kw = dict(reason=details or "", grpc_code=c.name if c else None)
        if c in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
            return E.InvalidArgumentError(msg, **kw)
        if c == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return E.TooLargeError(msg, **kw)
        if c in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return E.DeniedError(msg, **kw)
        if c == grpc.StatusCode.UNIMPLEMENTED and "unknown service kvoffload.v1.KVOffload" in (details or ""):
            msg += " (the member serves no kvoffload API there: a member's peer port? give its --api-addr)"
        return E.UnavailableError(msg, **kw)

    def _retry(self, name: str, offload: bool, deadline: Optional[float],
               op: Callable[[Any, Optional[float], int], T], member: bool = False) -> T:
        """Runs op(stub, timeout, attempt) on the current member until it succeeds, fails with
        an error whose outcome is known, or the deadline passes (client/retry.go retry). With
        member=True op gets the member's index instead of its stub."""
        backoff = self._backoff
        last: Optional[BaseException] = None  # the last error that left the outcome unknown
        refused: set = set()  # the members that refused this call (_refusal)
        refusal = ""  # the last refusal, described
        attempt = 0
        while True:
            attempt += 1
            if self._closed:
                raise E.ClosedError(f"{name}: client closed")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise self._give_up(name, offload, "deadline passed", last, attempt == 1)
            i = self._serving(refused)
            if i is None:
                if offload and last is not None:
                    raise E.IndeterminateError(f"{name}: {refusal} (an earlier attempt: {last})", reason=refusal)
                raise E.UnavailableError(f"{name}: {refusal}", reason=refusal, grpc_code="UNAVAILABLE")
            addr, _, stub = self._members[i]
            began = time.monotonic()
            err: Optional[BaseException] = None
            try:
                return op(i if member else stub, remaining, attempt)
            except _Renew:
                continue
            except (grpc.RpcError, _StreamEnded, E.ProtocolError) as e:
                err = e
            except ValueError as e:  # a channel closed under the call
                if self._closed:
                    raise E.ClosedError(f"{name}: client closed") from e
                raise
            finally:
                if self._on_attempt is not None:
                    self._on_attempt(name, addr, attempt, time.monotonic() - began, err)
            if isinstance(err, E.ProtocolError):
                if offload:
                    raise E.IndeterminateError(f"{name}: {err}", reason=err.reason) from err
                raise err
            if self._closed:
                raise E.ClosedError(f"{name}: client closed") from err
            timed_out = deadline is not None and time.monotonic() >= deadline
            if timed_out:
                raise self._give_up(name, offload, "deadline passed", err, False)
            why = _refusal.reason(err)
            if why is not None:
                # Final for this member, and nothing of the call was done there: the next
                # member at once, without a backoff, or the refusal when none is left.
                refused.add(i)
                refusal = f"{_refusal.describe(addr, why)}: {err.details()}"
                self._failover(i)
                continue
            if not self._retryable(err):
                raise self._permanent(name, err) from err
            last = err
            self._failover(i)
            if self._max_attempts and attempt >= self._max_attempts:
                raise self._give_up(name, offload, f"gave up after {attempt} attempts", last, False)
            q = backoff / 4
            pause = backoff - q + random.random() * 2 * q
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
            backoff = min(2 * backoff, self._max_backoff)

    @staticmethod
    def _give_up(name: str, offload: bool, cause: str, last: Optional[BaseException], unsent: bool) -> E.KVOffloadError:
        cls = E.IndeterminateError if offload and not unsent else E.UnavailableError
        detail = ""
        if last is not None:
            detail = f" (last error: {last.code().name}: {last.details()})" if isinstance(last, grpc.RpcError) and hasattr(last, "code") else f" (last error: {last})"
        return cls(f"{name}: {cause}{detail}")

    # -- BatchOffload ------------------------------------------------------------------

    def batch_offload(self, txn_id: bytes, objects: Sequence[Tuple[str, Value]], *,
                      timeout: Optional[float] = None) -> List[KeyResult]:
        """Stores objects, a sequence of (key, value) pairs, as one transaction named txn_id
        and returns one KeyResult per object, in order. Values are bytes, bytearray,
        memoryview or anything exporting a C-contiguous buffer (numpy); they must not change
        until the call returns. On a unix:// member the values are copied into a staging
        region and the node copies them out of it (the local path).

        A key check_key refuses is Rejected (INVALID_KEY), a value that is empty or over
        64 MiB (MaxObjectBytes) Rejected (INVALID_VALUE, TOO_LARGE), all without being sent.
        Raises InvalidArgumentError (zero or malformed txn ID, or one used for another batch),
        TooLargeError (over MaxBatchKeys 4096 or MaxBatchBytes 1 GiB), DeniedError,
        ClosedError, IndeterminateError (outcome unknown: call again with the same txn ID)."""
        tid, out, send, pos = self._prepare(txn_id, [(k, v) for k, v in objects], "BatchOffload")
        if send:
            got = self._batch_offload(tid, send, self._deadline(timeout))
            for j, r in zip(pos, got):
                out[j] = r
        return out  # type: ignore[return-value]

    def _prepare(self, txn_id: bytes, objects: List[Tuple[str, Any]], name: str):
        """The client-side checks of an offload: (txn ID, results so far, objects to send,
        their positions)."""
        tid = TxnID(txn_id)
        if tid.is_zero():
            raise E.InvalidArgumentError(f"{name}: zero txn ID (make one with new_txn_id())")
        if len(objects) > MAX_BATCH_KEYS:
            raise E.TooLargeError(f"{name}: {len(objects)} objects, over MaxBatchKeys {MAX_BATCH_KEYS}")
        out: List[Optional[KeyResult]] = [None] * len(objects)
        send: List[Tuple[str, Any]] = []
        pos: List[int] = []
        total = 0
        for i, (k, v) in enumerate(objects):
            why = check_key(k)
            if why:
                out[i] = KeyResult(k, Outcome.REJECTED, Code.INVALID_KEY, why + "; not sent")
                continue
            mv = _byteview(v)
            if mv.nbytes == 0:
                out[i] = KeyResult(k, Outcome.REJECTED, Code.INVALID_VALUE, "invalid value: empty; not sent")
                continue
            if mv.nbytes > MAX_OBJECT_BYTES:
                out[i] = KeyResult(k, Outcome.REJECTED, Code.TOO_LARGE,
                                   f"value of {mv.nbytes} bytes over MaxObjectBytes {MAX_OBJECT_BYTES}; not sent")
                continue
            total += mv.nbytes
            if mv.nbytes > self._value_hint:
                self._value_hint = mv.nbytes  # racy max: a hint only (client/offload.go)
            send.append((k, mv if not isinstance(v, bytes) else v))
            pos.append(i)
        if total > MAX_BATCH_BYTES:
            raise E.TooLargeError(f"{name}: {total} bytes, over MaxBatchBytes {MAX_BATCH_BYTES}")
        return tid, out, send, pos

    def _chunks(self, tid: bytes, objs: Sequence[Tuple[str, Any]]):
        chunk = self._chunk
        first = True
        for k, v in objs:
            n = len(v) if isinstance(v, bytes) else v.nbytes
            head = v if isinstance(v, bytes) and n <= chunk else bytes(v[:chunk])
            msg = pb.OffloadChunk(key=k, size=n, data=head)
            if first:
                msg.txn_id, first = tid, False
            yield msg
            for off in range(chunk, n, chunk):
                yield pb.OffloadChunk(data=bytes(v[off:off + chunk]))
        if first:
            yield pb.OffloadChunk(txn_id=tid)

    def _stage(self, lm: _Local, size: int, name: str, offload: bool, attempt: int) -> Optional[Region]:
        """A staging region of at least size bytes, or None to stream instead (local=None and
        the node refused a region, or the batch is over MAX_STAGING_BYTES)."""
        if size > MAX_STAGING_BYTES and not self._require_local:
            return None
        try:
            if size > MAX_STAGING_BYTES:
                raise E.TooLargeError(f"{name}: {size} bytes, over the {MAX_STAGING_BYTES} of one staging region")
            return lm.staging.get(size)
        except E.KVOffloadError as e:
            if not self._require_local:
                logger.debug("kvoffload: no staging region on %s (%s); streaming", lm.path, e)
                return None
            if offload and attempt > 1:
                raise E.IndeterminateError(f"{name}: an earlier attempt's outcome is unknown, and then {e}",
                                           reason=e.reason) from e
            raise

    def _offload_local(self, lm: _Local, r: Region, tid: bytes, objs: List[Tuple[str, Any]],
                       descs: Optional[List[Any]], remaining: Optional[float], staging: bool):
        """One LocalKVOffload.Offload; with staging, objs are first copied into r (one copy:
        a memoryview slice assignment) and r is unregistered if the call fails, never reused
        (the node may still be copying from it; client/local.go offloadLocal)."""
        if staging:
            buf, off, descs = r.buf, 0, []
            for k, v in objs:
                n = len(v) if isinstance(v, bytes) else v.nbytes
                buf[off:off + n] = v
                descs.append(pb.Desc(key=k, offset=off, length=n))
                off += n
        try:
            resp = _on_region(r, not staging, lambda ref: lm.stub.Offload(
                pb.LocalOffloadRequest(txn_id=tid, region=ref, objects=descs), timeout=remaining, metadata=self._metadata))
        except grpc.RpcError as e:
            if staging:
                lm.staging.put(r, failed=True)
                if _lost(e):
                    lm.staging.lost(r)
                    raise _LostRegion(f"staging region lost (the node restarted?): {e.details()}") from e
            raise
        if staging:
            lm.staging.put(r, failed=False)
        return resp

    def _batch_offload(self, tid: TxnID, objs: List[Tuple[str, Any]], deadline: Optional[float],
                       region: Optional[Region] = None, descs: Optional[List[Any]] = None,
                       name: str = "BatchOffload") -> List[KeyResult]:
        state = {"id": tid, "renewed": False}
        total = sum(len(v) if isinstance(v, bytes) else v.nbytes for _, v in objs)

        def op(i, remaining, attempt):
            stub, lm = self._members[i][2], self._local[i]
            resp = None
            if lm is not None and region is not None and region._reg is lm.staging.reg:
                resp = self._offload_local(lm, region, state["id"], objs, descs, remaining, staging=False)
            elif lm is not None:
                r = self._stage(lm, total, name, True, attempt)
                if r is not None:
                    resp = self._offload_local(lm, r, state["id"], objs, None, remaining, staging=True)
            if resp is None:
                resp = stub.BatchOffload(self._chunks(state["id"], objs), timeout=remaining, metadata=self._metadata)
            if len(resp.results) != len(objs):
                raise E.ProtocolError(f"{name}: {len(resp.results)} results for {len(objs)} objects")
            res = [_key_result(r, k) for r, (k, _) in zip(resp.results, objs)]
            if attempt > 1 and not state["renewed"] and res and all(
                    r.outcome == Outcome.FAILED and r.code == Code.ABORTED for r in res):
                # An earlier attempt was cut off and the cluster aborted that transaction: it
                # stored nothing, and its ID answers "aborted" for ever. Start afresh.
                state["id"], state["renewed"] = new_txn_id(), True
                raise _Renew()
            return res

        return self._retry(name, True, deadline, op, member=True)

    # -- BatchGet ----------------------------------------------------------------------

    def batch_get(self, keys: Sequence[str], *, timeout: Optional[float] = None) -> List[GetResult]:
        """Reads keys; one GetResult per key, in order (value: bytes when FOUND). A key
        check_key refuses is INVALID_KEY and not sent. Raises UnavailableError,
        TooLargeError, DeniedError, ClosedError, ProtocolError. On a unix:// member each key
        first gets room for the largest value this client has seen (64 KiB at first) in a
        staging region; keys that did not fit are read again with their sizes."""
        return self._get(keys, None, timeout)

    def batch_get_into(self, keys: Sequence[str], buffers: Sequence[Buffer], *,
                       timeout: Optional[float] = None) -> List[GetResult]:
        """batch_get into caller-owned buffers (bytearray, writable memoryview, numpy array,
        anything exporting a writable C-contiguous buffer): the value of keys[i] is assembled
        in buffers[i] chunk by chunk as it arrives (on a unix:// member: copied once out of
        the staging region the node wrote it into), with no other copy in Python, and
        GetResult.value is a memoryview of buffers[i][:size]. A buffer shorter than its value
        gives SHORT_BUFFER with the size (the buffer is left as it was). A retried attempt may
        write a buffer again. len(buffers) != len(keys) raises InvalidArgumentError."""
        if len(buffers) != len(keys):
            raise E.InvalidArgumentError(f"BatchGetInto: {len(buffers)} buffers for {len(keys)} keys")
        return self._get(keys, [_byteview(b, writable=True) for b in buffers], timeout)

    def _get(self, keys: Sequence[str], bufs: Optional[List[memoryview]], timeout: Optional[float],
             region: Optional[Region] = None, descs: Optional[List[Any]] = None,
             name: str = "BatchGet") -> List[GetResult]:
        if len(keys) > MAX_BATCH_KEYS:
            raise E.TooLargeError(f"{name}: {len(keys)} keys, over MaxBatchKeys {MAX_BATCH_KEYS}")
        out: List[Optional[GetResult]] = [None] * len(keys)
        send, pos = [], []
        for i, k in enumerate(keys):
            why = check_key(k)
            if why:
                out[i] = GetResult(k, GetStatus.INVALID_KEY, code=Code.INVALID_KEY, reason=why + "; not sent")
            else:
                send.append(k)
                pos.append(i)
        if send:
            sbufs = None if bufs is None else [bufs[i] for i in pos]
            sdescs = None if descs is None else [descs[i] for i in pos]
            deadline = self._deadline(timeout)

            def op(i, remaining, attempt):
                lm = self._local[i]
                if lm is not None and region is not None and region._reg is lm.staging.reg:
                    return self._get_region(lm, region, sdescs, remaining, sbufs)
                if lm is not None and region is None:
                    got = self._get_local(lm, send, sbufs, remaining, name, attempt)
                    if got is not None:
                        return got
                stream = self._members[i][2].BatchGet(pb.GetRequest(keys=send), timeout=remaining, metadata=self._metadata)
                try:
                    return _collect(stream, send, sbufs)
                finally:
                    stream.cancel()

            got = self._retry(name, False, deadline, op, member=True)
            for j, r in zip(pos, got):
                out[j] = r
        return out  # type: ignore[return-value]

    def _get_local(self, lm: _Local, keys: List[str], bufs: Optional[List[memoryview]],
                   remaining: Optional[float], name: str, attempt: int) -> Optional[List[GetResult]]:
        """One local BatchGet attempt (client/local.go getLocal); None to stream instead."""
        # The room per key is capped so that the first read fits one staging region.
        hint = min(self._value_hint, MAX_STAGING_BYTES // max(len(keys), 1))
        lengths = [b.nbytes for b in bufs] if bufs is not None else [hint] * len(keys)
        out = self._get_local_once(lm, keys, lengths, bufs, remaining, name, attempt)
        if out is None or bufs is not None:
            return out
        again = [i for i, g in enumerate(out) if g.status == GetStatus.SHORT_BUFFER]
        for i in again:
            if out[i].size > self._value_hint:
                self._value_hint = out[i].size
        # Read the keys that did not fit again with their sizes, in groups of at most one
        # staging region each (a value is at most 64 MiB, MaxObjectBytes).
        while again:
            group, room = [], 0
            while again and (not group or room + out[again[0]].size <= MAX_STAGING_BYTES):
                room += out[again[0]].size
                group.append(again.pop(0))
            more = self._get_local_once(lm, [keys[i] for i in group], [out[i].size for i in group], None,
                                        remaining, name, attempt)
            if more is None:
                return None
            for j, i in enumerate(group):
                out[i] = more[j]
        return out

    def _get_local_once(self, lm: _Local, keys: List[str], lengths: List[int], bufs: Optional[List[memoryview]],
                        remaining: Optional[float], name: str, attempt: int) -> Optional[List[GetResult]]:
        descs, total = [], 0
        for k, n in zip(keys, lengths):
            descs.append(pb.Desc(key=k, offset=total, length=n))
            total += n
        r = self._stage(lm, total, name, False, attempt)
        if r is None:
            return None
        failed = True
        try:
            try:
                resp = lm.stub.Get(pb.LocalGetRequest(region=r.ref(), keys=descs), timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as e:
                if _lost(e):
                    lm.staging.lost(r)
                    raise _LostRegion(f"staging region lost (the node restarted?): {e.details()}") from e
                raise
            out = _local_results(resp, descs, r.buf, bufs, copy=True)
            failed = False
            return out
        finally:
            lm.staging.put(r, failed=failed)

    def _get_region(self, lm: _Local, r: Region, descs: List[Any], remaining: Optional[float],
                    bufs: List[memoryview]) -> List[GetResult]:
        resp = _on_region(r, True, lambda ref: lm.stub.Get(pb.LocalGetRequest(region=ref, keys=descs),
                                                            timeout=remaining, metadata=self._metadata))
        return _local_results(resp, descs, r.buf, bufs, copy=False)

    # -- the zero-copy local path ------------------------------------------------------

    def new_region(self, size: int) -> Region:
        """Registers a shared-memory region of size bytes with the first unix:// member, for
        offload_from and get_into_region: the zero-copy path (Go Client.NewRegion). Fill
        region.buf (a writable memoryview) in place. The node maps it and counts it against
        its limits: TooLargeError names the one refused (MaxRegionBytes 4 GiB,
        MaxRegionsPerConn 64, MaxRegions 1024, MaxMappedBytes 64 GiB by default;
        docs/design.md). InvalidArgumentError when no member is unix:// (or local=False) or
        size is not positive, UnavailableError when the socket cannot be reached. Close it
        with region.close() (the client's close() closes it too)."""
        if self._closed:
            raise E.ClosedError("NewRegion: client closed")
        for lm in self._local:
            if lm is not None:
                return lm.staging.reg.register(size, keep=True)
        raise E.InvalidArgumentError("NewRegion: no member has a unix:// address (a node's --local-socket) with local enabled")

    @staticmethod
    def _check_descs(name: str, r: Region, descs: Sequence[Tuple[str, int, int]]) -> List[Any]:
        if r.closed:
            raise E.InvalidArgumentError(f"{name}: the region is closed")
        out = []
        for i, (k, off, n) in enumerate(descs):
            if off < 0 or n < 0 or off > r.size or n > r.size - off:
                raise E.InvalidArgumentError(
                    f"{name}: descriptor {i} ({k!r}) [{off}, +{n}) is outside the region of {r.size} bytes")
            out.append(pb.Desc(key=k, offset=off, length=n))
        return out

    def offload_from(self, txn_id: bytes, region: Region, descs: Sequence[Tuple[str, int, int]], *,
                     timeout: Optional[float] = None) -> List[KeyResult]:
        """Stores the ranges descs name, (key, offset, length) of region, as one transaction
        named txn_id, like batch_offload, without a copy on the client: the node reads each
        range in place, and a range rewritten during the call is REJECTED (CODE_INVALID_VALUE)
        or stored as read, never under a checksum it does not have (Go Client.OffloadFrom). A descriptor
        outside the region raises InvalidArgumentError; keys and empty ranges are checked as
        in batch_offload. If the call moves to a member that does not hold the region (a
        failover), the ranges are streamed from it. Do not rewrite the ranges until the call
        returns; after IndeterminateError, not until a retry with the same txn ID has returned.
        A closed region is InvalidArgumentError; one the node lost in a restart is registered
        again (Region.renew) and the call goes on."""
        pdescs = self._check_descs("OffloadFrom", region, descs)
        objs = [(d.key, region.buf[d.offset:d.offset + d.length]) for d in pdescs]
        tid, out, send, pos = self._prepare(txn_id, objs, "OffloadFrom")
        if send:
            got = self._batch_offload(tid, send, self._deadline(timeout), region=region,
                                      descs=[pdescs[i] for i in pos], name="OffloadFrom")
            for j, r in zip(pos, got):
                out[j] = r
        return out  # type: ignore[return-value]

    def get_into_region(self, region: Region, descs: Sequence[Tuple[str, int, int]], *,
                        timeout: Optional[float] = None) -> List[GetResult]:
        """Reads the keys descs name into region, each value at its descriptor's offset, like
        batch_get_into with no copy on the client (Go Client.GetInto): GetResult.value is a
        memoryview of region.buf (valid until the range is reused). A value longer than its
        length is SHORT_BUFFER with its size; a descriptor outside the region raises
        InvalidArgumentError. A member that does not hold the region streams into the ranges."""
        pdescs = self._check_descs("GetInto", region, descs)
        bufs = [region.buf[d.offset:d.offset + d.length] for d in pdescs]
        return self._get([d.key for d in pdescs], bufs, timeout, region=region, descs=pdescs, name="GetInto")

    # -- unary calls -------------------------------------------------------------------

    def batch_exists(self, keys: Sequence[str], lease: float = 0.0, *,
                     timeout: Optional[float] = None) -> ExistsResult:
        """Per key PRESENT, ABSENT, IN_FLIGHT or UNKNOWN (the member could not confirm it;
        reason says why), and how many leading keys are PRESENT. lease (seconds) asks the
        answering node to pin the present objects whose bytes it owns against eviction for
        that long. A key check_key refuses is ABSENT and not sent."""
        if len(keys) > MAX_BATCH_KEYS:
            raise E.TooLargeError(f"BatchExists: {len(keys)} keys, over MaxBatchKeys {MAX_BATCH_KEYS}")
        ps: List[Presence] = [Presence.ABSENT] * len(keys)
        send = [(i, k) for i, k in enumerate(keys) if not check_key(k)]
        reason = ""
        if send:
            req = pb.ExistsRequest(keys=[k for _, k in send], lease_ms=min(max(int(lease * 1000), 0), 2**32 - 1))

            def op(stub, remaining, attempt):
                resp = stub.BatchExists(req, timeout=remaining, metadata=self._metadata)
                if len(resp.keys) != len(send):
                    raise E.ProtocolError(f"BatchExists: {len(resp.keys)} answers for {len(send)} keys")
                return resp

            resp = self._retry("BatchExists", False, self._deadline(timeout), op)
            for (i, _), p in zip(send, resp.keys):
                ps[i] = Presence(p) if p in (1, 2, 3) else Presence.UNKNOWN
            reason = resp.reason
        return ExistsResult(ps, leading_present(ps), reason)

    def remove(self, keys: Sequence[str], *, timeout: Optional[float] = None) -> List[RemoveResult]:
        """Deletes keys (metadata first, bytes after); per key whether it was removed. Every
        attempt carries the same txn ID, so the cluster applies the removal once. Raises
        UnavailableError when it could not be confirmed (some keys may be removed; call
        again: it is idempotent)."""
        if len(keys) > MAX_BATCH_KEYS:
            raise E.TooLargeError(f"Remove: {len(keys)} keys, over MaxBatchKeys {MAX_BATCH_KEYS}")
        removed = [False] * len(keys)
        send = [(i, k) for i, k in enumerate(keys) if not check_key(k)]
        if send:
            req = pb.RemoveRequest(keys=[k for _, k in send], txn_id=bytes(new_txn_id()))

            def op(stub, remaining, attempt):
                resp = stub.Remove(req, timeout=remaining, metadata=self._metadata)
                if len(resp.removed) != len(send):
                    raise E.ProtocolError(f"Remove: {len(resp.removed)} answers for {len(send)} keys")
                return list(resp.removed)

            got = self._retry("Remove", False, self._deadline(timeout), op)
            for (i, _), r in zip(send, got):
                removed[i] = r
        return [RemoveResult(k, r) for k, r in zip(keys, removed)]

    def stats(self, *, timeout: Optional[float] = None) -> Stats:
        """The counters and space accounting of the member the client talks to."""
        s = self._retry("Stats", False, self._deadline(timeout),
                        lambda stub, rem, a: stub.Stats(pb.StatsRequest(), timeout=rem, metadata=self._metadata))
        return Stats(s.node_id, s.keys, s.bytes, s.local_keys, s.local_bytes, s.live_bytes,
                     s.allocated_bytes, dict(s.counters))

    def status(self, *, timeout: Optional[float] = None) -> ClusterStatus:
        """The cluster's members, leader, and keys and bytes per node."""
        s = self._retry("Status", False, self._deadline(timeout),
                        lambda stub, rem, a: stub.Status(pb.StatusRequest(), timeout=rem, metadata=self._metadata))
        return ClusterStatus(s.leader_id, [Member(m.node_id, m.raft_addr, m.api_addr, m.peer_addr, m.voter, m.leader,
                                                  m.keys, m.bytes) for m in s.members],
                             s.applied_index, s.keys, s.bytes, s.cluster_id,
                             s.build, s.free_bytes if s.build else -1, s.reserve_bytes)


    # -- WatchEvents -------------------------------------------------------------------

    def watch(self, from_pos: Union[str, Tuple[int, int]] = (0, 0), *, until_now: bool = False,
              list_keys: bool = False, timeout: Optional[float] = None) -> Iterator["Event"]:
        """Yields the cluster's key events after from_pos, in Raft order (Go Client.Watch;
        docs/api.md "Watching the stored keys"). from_pos is an Event's pos ("index.ordinal")
        or (index, ordinal); the default is before every event. Each Event has kind "stored",
        "removed" (with cause: removed, evicted, owner_left, pruned), "reset" (listed:
        the number of "listed" events that follow, the whole state at the reset's pos) or
        "listed". A stream that breaks is resumed on the next member after the last event
        yielded (a listing cut short is asked for again), so no event is skipped or repeated.
        until_now: stop once every event committed when the call began was yielded.
        list_keys: begin with a reset and the listing whatever from_pos. timeout: seconds
        for the whole watch (None: no deadline).

        Raises ClosedError, DeniedError, UnavailableError (deadline, or every member refused
        the stream: each serves a bounded number of watchers), InvalidArgumentError (from_pos
        malformed, or beyond every member's log), ProtocolError (an event out of order)."""
        resume = _parse_pos(from_pos)
        deadline = None if timeout is None else time.monotonic() + timeout
        relist, listing, pending = list_keys, 0, resume
        backoff, refusals = self._backoff, 0
        while True:
            if self._closed:
                raise E.ClosedError("Watch: client closed")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise E.UnavailableError("Watch: deadline passed")
            with self._lock:
                i = self._cur
            addr, _, stub = self._members[i]
            req = pb.WatchRequest(from_index=resume[0], from_ordinal=resume[1], until_now=until_now, list=relist)
            got = False
            try:
                for resp in stub.WatchEvents(req, timeout=remaining, metadata=self._metadata):
                    got = True
                    for pe in resp.events:
                        ev = _event(pe)
                        if ev.kind in ("stored", "removed"):
                            if listing or (ev.index, ev.ordinal) <= resume or ev.ordinal == 0:
                                raise E.ProtocolError(f"Watch: event at {ev.pos} after {_pos_str(resume)}")
                            resume = (ev.index, ev.ordinal)
                        elif ev.kind == "reset":
                            listing, pending, relist = ev.listed, (ev.index, 0), False
                            if not listing:
                                resume = pending
                        elif ev.kind == "listed":
                            if not listing or (ev.index, ev.ordinal) != pending:
                                raise E.ProtocolError(f"Watch: listed key at {ev.pos} outside a listing")
                            listing -= 1
                            if not listing:
                                resume = pending
                        else:
                            raise E.ProtocolError(f"Watch: event of kind {pe.kind}")
                        yield ev
                if listing:
                    raise E.ProtocolError(f"Watch: stream ended with {listing} listed keys missing")
                return
            except grpc.RpcError as err:
                if listing:
                    relist, listing = True, 0
                if self._closed:
                    raise E.ClosedError("Watch: client closed") from err
                if deadline is not None and time.monotonic() >= deadline:
                    raise E.UnavailableError(f"Watch: deadline passed (last error: {err.code().name}: {err.details()})") from err
                c = err.code() if hasattr(err, "code") else None
                if got:
                    refusals, backoff = 0, self._backoff
                if c in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                    raise self._permanent("Watch", err) from err
                if c in (grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT):
                    refusals += 1
                    if refusals >= len(self._members):
                        cls = E.UnavailableError if c == grpc.StatusCode.RESOURCE_EXHAUSTED else E.InvalidArgumentError
                        raise cls(f"Watch from {_pos_str(resume)}: every member refused: {c.name}: {err.details()}",
                                  reason=err.details() or "", grpc_code=c.name) from err
                elif _refusal.reason(err) is None and not self._retryable(err):
                    raise self._permanent("Watch", err) from err
                self._failover(i)
                q = backoff / 4
                time.sleep(backoff - q + random.random() * 2 * q)
                backoff = min(2 * backoff, self._max_backoff)


class Event(NamedTuple):
    """One event of the key event stream (Client.watch). pos is "index.ordinal", the
    position to resume from; size is payload bytes; node the node holding (or that held)
    the bytes; cause is set on "removed"; listed and reason on "reset"."""
    kind: str
    pos: str
    index: int
    ordinal: int
    key: str = ""
    size: int = 0
    node: str = ""
    generation: int = 0
    cause: str = ""
    listed: int = 0
    reason: str = ""


_KINDS = {1: "stored", 2: "removed", 3: "reset", 4: "listed"}
_CAUSES = {1: "removed", 2: "evicted", 3: "owner_left", 4: "pruned"}


def _event(pe) -> Event:
    return Event(_KINDS.get(pe.kind, str(pe.kind)), f"{pe.index}.{pe.ordinal}", pe.index, pe.ordinal, pe.key, pe.size,
                 pe.node, pe.generation, _CAUSES.get(pe.cause, "") if pe.kind == 2 else "", pe.listed, pe.reason)


def _pos_str(p: Tuple[int, int]) -> str:
    return f"{p[0]}.{p[1]}"


def _parse_pos(p: Union[str, Tuple[int, int]]) -> Tuple[int, int]:
    """Reads "index.ordinal", "index" or (index, ordinal); raises InvalidArgumentError."""
    try:
        if isinstance(p, str):
            i, _, o = p.partition(".")
            t = (int(i), int(o) if o else 0)
        else:
            t = (int(p[0]), int(p[1]))
    except (ValueError, TypeError, IndexError) as e:
        raise E.InvalidArgumentError(f"Watch: position {p!r}: {e}") from e
    if not (0 <= t[0] < 1 << 64 and 0 <= t[1] < 1 << 32):
        raise E.InvalidArgumentError(f"Watch: position {p!r} out of range")
    return t


def _key_result(r, key: str) -> KeyResult:
    """internal/wire KeyResultFromPB: an outcome this build does not know is FAILED/INTERNAL."""
    try:
        o = Outcome(r.outcome)
    except ValueError:
        o = Outcome.UNSPECIFIED
    if o == Outcome.UNSPECIFIED:
        return KeyResult(key, Outcome.FAILED, Code.INTERNAL,
                         f"unknown outcome {r.outcome} from the member: {r.reason}", r.joined)
    return KeyResult(key, o, code_of(r.code), r.reason, r.joined)


def _local_results(resp, descs: List[Any], mem: memoryview, bufs: Optional[List[memoryview]],
                   copy: bool) -> List[GetResult]:
    """A LocalGetResponse as GetResults (client/local.go localResults, fromLocal). With copy,
    each Found value is copied out of mem (into bufs[i] when given, else into bytes);
    without, its value is a view of mem (bufs[i] is that range)."""
    if len(resp.results) != len(descs):
        raise E.ProtocolError(f"{len(resp.results)} results for {len(descs)} keys")
    out = []
    for i, g in enumerate(resp.results):
        d = descs[i]
        if g.code == pb.CODE_SHORT_BUFFER:
            out.append(GetResult(d.key, GetStatus.SHORT_BUFFER, size=g.size, code=Code.SHORT_BUFFER, reason=g.reason))
            continue
        if g.status not in (1, 2, 3, 4, 5):
            out.append(GetResult(d.key, GetStatus.UNAVAILABLE, code=Code.INTERNAL,
                                 reason=f"unknown status {g.status} from the member: {g.reason}"))
            continue
        st = GetStatus(g.status)
        if st != GetStatus.FOUND:
            code = code_of(g.code)
            out.append(GetResult(d.key, st, code=Code.UNAVAILABLE if code == Code.NONE else code, reason=g.reason))
            continue
        if g.size > d.length:
            raise E.ProtocolError(f"key {d.key!r}: a value of {g.size} bytes for a descriptor of {d.length}")
        src = mem[d.offset:d.offset + g.size]
        if not copy:
            value = src
        elif bufs is not None:
            bufs[i][:g.size] = src
            value = bufs[i][:g.size]
        else:
            value = bytes(src)
        out.append(GetResult(d.key, GetStatus.FOUND, value=value, size=g.size))
    return out


def _collect(stream, keys: List[str], bufs: Optional[List[memoryview]]) -> List[GetResult]:
    """Reassembles a GetChunk stream (internal/wire/collect.go Collect). A value whose byte
    count differs from the announced size is UNAVAILABLE, never returned truncated."""
    n = len(keys)
    res = [GetResult(k, GetStatus.UNSPECIFIED) for k in keys]
    seen = [False] * n
    cur = -1
    want = got = 0
    parts: List[bytes] = []
    dst: Optional[memoryview] = None
    skipping = False  # the rest of a value already reported SHORT_BUFFER or UNAVAILABLE

    def fail(i: int, why: str) -> None:
        r = res[i]
        r.status, r.value, r.size, r.code, r.reason = GetStatus.UNAVAILABLE, None, 0, Code.UNAVAILABLE, why

    def finish() -> None:
        nonlocal cur, parts, dst, skipping
        if cur >= 0 and res[cur].status == GetStatus.FOUND:
            if got != want:
                fail(cur, f"value truncated: got {got} of {want} bytes")
            elif dst is not None:
                res[cur].value = dst[:want]
            else:
                res[cur].value = parts[0] if len(parts) == 1 else b"".join(parts)
        cur, parts, dst, skipping = -1, [], None, False

    try:
        for ch in stream:
            if ch.status == pb.GET_STATUS_UNSPECIFIED:  # a data chunk of the current key
                if cur < 0 or (ch.index != 0 and ch.index != cur):
                    raise E.ProtocolError(f"data chunk for key index {ch.index} while reading {cur}")
                d = ch.data
                if skipping or not d:
                    continue
                if res[cur].status != GetStatus.FOUND:
                    raise E.ProtocolError(f"data for key {cur} whose status is {res[cur].status.name}")
                if got + len(d) > want:
                    fail(cur, f"value longer than the announced {want} bytes")
                    skipping = True
                    continue
                if dst is not None:
                    dst[got:got + len(d)] = d
                else:
                    parts.append(d)
                got += len(d)
                continue
            finish()
            i = ch.index
            if i >= n or seen[i]:
                raise E.ProtocolError(f"chunk for key index {i} ({n} keys, seen before: {i < n})")
            seen[i], cur = True, i
            r = res[i]
            if ch.status in (1, 2, 3, 4, 5):
                r.status, r.code, r.reason = GetStatus(ch.status), code_of(ch.code), ch.reason
            else:
                r.status, r.code = GetStatus.UNAVAILABLE, Code.INTERNAL
                r.reason = f"unknown status {ch.status} from the member: {ch.reason}"
            if r.status != GetStatus.FOUND:
                if r.code == Code.NONE:
                    r.code = Code.UNAVAILABLE  # a member that predates codes
                if ch.data:
                    raise E.ProtocolError(f"data for key {i} whose status is {r.status.name}")
                continue
            want, got = ch.size, 0
            if want > _MAX_VALUE_BYTES:
                raise E.ProtocolError(f"{want} bytes announced for key {i}, over the largest value of {_MAX_VALUE_BYTES}")
            r.size = want
            if bufs is not None:
                if bufs[i].nbytes < want:
                    res[i] = GetResult(r.key, GetStatus.SHORT_BUFFER, size=want, code=Code.SHORT_BUFFER,
                                       reason=f"buffer of {bufs[i].nbytes} bytes for a value of {want} bytes")
                    skipping = True
                    continue
                dst = bufs[i]
            d = ch.data
            if d:
                if len(d) > want:
                    fail(i, f"value longer than the announced {want} bytes")
                    skipping = True
                elif dst is not None:
                    dst[0:len(d)] = d
                    got = len(d)
                else:
                    parts.append(d)
                    got = len(d)
    except grpc.RpcError:
        raise
    finish()
    for i, ok in enumerate(seen):
        if not ok:
            raise _StreamEnded(f"no result for key {i} ({keys[i]!r}) of {n}")
    return res
