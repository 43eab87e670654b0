"""Stub of vllm-project/vllm vllm/v1/kv_offload/base.py: OffloadKey (block hash + 4-byte
big-endian group index), ReqContext, RequestOffloadingContext."""

from dataclasses import dataclass, field
from typing import Any, NewType

OffloadKey = NewType("OffloadKey", bytes)


def make_offload_key(block_hash: bytes, group_idx: int) -> OffloadKey:
    return OffloadKey(block_hash + group_idx.to_bytes(4, "big", signed=False))


@dataclass
class ReqContext:
    req_id: str = ""
    kv_transfer_params: Any = None


@dataclass
class RequestOffloadingContext:
    extra: dict = field(default_factory=dict)
