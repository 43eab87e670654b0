"""The vocabulary of the store, mirroring the Go package kvoffload (types.go, code.go and
check.go at the module root) with the same numbers as the wire (api/kvoffload/v1/kvoffload.proto).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union

# The store's default limits (txn/config.go DefaultConfig; the protocol's chunk size,
# internal/wire/wire.go ChunkBytes). The client checks them before sending.
MAX_KEY_BYTES = 1024
MAX_OBJECT_BYTES = 64 << 20
MAX_BATCH_KEYS = 4096
MAX_BATCH_BYTES = 1 << 30
CHUNK_BYTES = 1 << 20
TXN_ID_BYTES = 16


class _Named(enum.IntEnum):
    """An IntEnum that prints as its name (STORED), as the Go types' String methods do, and
    still compares and converts as its wire number."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        # A numeric presentation type (d, x, 5d, ...) formats the number; any other spec
        # (width, alignment) formats the name.
        if spec and spec[-1] in "bcdoxXneEfFgG%":
            return format(int(self), spec)
        return format(self.name, spec)


class Outcome(_Named):
    """Per-key result of batch_offload (proto Outcome, Go kvoffload.Outcome)."""

    UNSPECIFIED = 0
    STORED = 1
    ALREADY_STORED = 2
    CONFLICT = 3
    REJECTED = 4
    FAILED = 5


class GetStatus(_Named):
    """Per-key result of batch_get (proto GetStatus; SHORT_BUFFER never travels)."""

    UNSPECIFIED = 0
    FOUND = 1
    NOT_FOUND = 2
    CORRUPT = 3
    UNAVAILABLE = 4
    INVALID_KEY = 5
    SHORT_BUFFER = 6


class Presence(_Named):
    """Per-key answer of batch_exists (proto Presence)."""

    UNSPECIFIED = 0
    PRESENT = 1
    ABSENT = 2
    IN_FLIGHT = 3
    UNKNOWN = 4


class Code(_Named):
    """Why a key is not stored or not found (proto Code, Go kvoffload.Code, same numbers;
    code.go at the module root documents each). A number this build does not know is kept as
    an int, never read as NONE."""

    NONE = 0
    INVALID_KEY = 1
    INVALID_VALUE = 2
    TOO_LARGE = 3
    QUOTA = 4
    BACK_PRESSURE = 5
    STALE_GENERATION = 6
    ABORTED = 7
    TXN_ID_REUSED = 8
    MISMATCH = 9
    DUPLICATE_KEY = 10
    REFUSED = 11
    IO = 12
    CANCELED = 13
    UNAVAILABLE = 14
    NOT_FOUND = 15
    CORRUPT = 16
    SHORT_BUFFER = 17
    INTERNAL = 18
    NO_SPACE = 19


def code_of(n: int) -> Union[Code, int]:
    """The Code numbered n, or n itself when this build does not know it."""
    try:
        return Code(n)
    except ValueError:
        return n


class TxnID(bytes):
    """A 16-byte transaction ID. Make one per batch with new_txn_id(); reuse it only to
    retry the same batch (the store then returns the original results)."""

    def __new__(cls, b: bytes):
        b = bytes(b)
        if len(b) != TXN_ID_BYTES:
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(f"txn ID of {len(b)} bytes; it must be {TXN_ID_BYTES} bytes")
        return super().__new__(cls, b)

    def is_zero(self) -> bool:
        return not any(self)

    def __str__(self) -> str:
        return self.hex()

    def __repr__(self) -> str:
        return f"TxnID({self.hex()})"


def new_txn_id() -> TxnID:
    """A fresh random transaction ID (Go kvoffload.NewTxnID: crypto/rand)."""
    return TxnID(os.urandom(TXN_ID_BYTES))


def check_key(key: str) -> str:
    """Why key can never name an object, or "" if it can (Go kvoffload.CheckKey, check.go:
    1 or more bytes of UTF-8 without ASCII control characters), plus the store's default key
    limit (MAX_KEY_BYTES, 1024 bytes; txn/plan.go invalidKey)."""
    if not isinstance(key, str):
        return f"invalid key: {type(key).__name__}, not str"
    if key == "":
        return "invalid key: empty"
    try:
        b = key.encode("utf-8")
    except UnicodeEncodeError:
        return "invalid key: not valid UTF-8"
    if len(b) > MAX_KEY_BYTES:
        return f"invalid key: {len(b)} bytes exceeds the limit of {MAX_KEY_BYTES} (MaxKeyBytes)"
    for i, c in enumerate(b):
        if c < 0x20 or c == 0x7F:
            return f"invalid key: control character at byte {i}"
    return ""


@dataclass
class KeyResult:
    """The outcome of one object of batch_offload."""

    key: str
    outcome: Outcome
    code: Union[Code, int] = Code.NONE
    reason: str = ""
    joined: bool = False  # the key was being stored by another transaction; this one waited for it

    @property
    def ok(self) -> bool:
        """True when the key is stored (Stored or AlreadyStored)."""
        return self.outcome in (Outcome.STORED, Outcome.ALREADY_STORED)


@dataclass
class GetResult:
    """The outcome of reading one key. value is bytes (batch_get) or a memoryview of the
    caller's buffer (batch_get_into) when status is FOUND, else None."""

    key: str
    status: GetStatus
    value: Optional[Union[bytes, memoryview]] = None
    size: int = 0
    code: Union[Code, int] = Code.NONE
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == GetStatus.FOUND


@dataclass
class ExistsResult:
    keys: List[Presence]
    prefix_present: int
    reason: str = ""


@dataclass
class RemoveResult:
    key: str
    removed: bool


@dataclass
class Stats:
    node_id: str
    keys: int
    bytes: int
    local_keys: int
    local_bytes: int
    live_bytes: int
    allocated_bytes: int
    counters: Dict[str, int] = field(default_factory=dict)


@dataclass
class Member:
    node_id: str
    raft_addr: str
    api_addr: str
    peer_addr: str
    voter: bool
    leader: bool
    keys: int
    bytes: int


@dataclass
class ClusterStatus:
    leader_id: str
    members: List[Member]
    applied_index: int
    keys: int
    bytes: int
    cluster_id: str
    # The answering member's binary (storenode version) and data filesystem: free bytes (-1:
    # unknown) and the space reserve kept for the WAL and the Raft log.
    build: str = ""
    free_bytes: int = -1
    reserve_bytes: int = 0


def leading_present(ps: List[Presence]) -> int:
    """How many leading keys are PRESENT (Go kvoffload.LeadingPresent)."""
    n = 0
    for p in ps:
        if p != Presence.PRESENT:
            break
        n += 1
    return n
