"""kvoffload: the Python client of the kvoffload store (README.md, python/README.md).

    from kvoffload import Client, new_txn_id
    with Client(["127.0.0.1:7101", "127.0.0.1:7102"]) as c:
        res = c.batch_offload(new_txn_id(), [("k", b"block")])
        got = c.batch_get(["k"])

An address "unix:///PATH" (a node's --local-socket) uses the shared-memory path on this host.
The engine backends import their engine only when used: kvoffload.sglang, kvoffload.lmcache,
kvoffload.vllm; the vLLM KV-events publisher is kvoffload.events (python3 -m kvoffload.events).
PresenceHint(client, prefix=...) keeps the stored keys from the key event stream.
"""

from .client import Client, Event
from .hint import Follower, PresenceHint
from .local import Region
from .errors import (
    ClosedError,
    DeniedError,
    IndeterminateError,
    InvalidArgumentError,
    KVOffloadError,
    ProtocolError,
    TooLargeError,
    UnavailableError,
    UnreachableError,
)
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
    Outcome,
    Presence,
    RemoveResult,
    Stats,
    TxnID,
    check_key,
    new_txn_id,
)

__all__ = [name for name in dir() if not name.startswith("_")]
