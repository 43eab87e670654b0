"""Stub of vllm-project/vllm vllm/v1/kv_offload/base.py as the previous tier interface
(tiering/base.py@041410b9) imports it: OffloadKey, ReqContext, RequestOffloadingContext, and
no LookupResult (lookups answer True / False / None)."""

from dataclasses import dataclass
from typing import Any, NewType

OffloadKey = NewType("OffloadKey", bytes)


def make_offload_key(block_hash: bytes, group_idx: int) -> OffloadKey:
    return OffloadKey(block_hash + group_idx.to_bytes(4, "big", signed=False))


@dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: "dict[str, Any] | None" = None


@dataclass
class RequestOffloadingContext:
    pass
