"""Stub of vllm-project/vllm vllm/v1/kv_offload/tiering/base.py@041410b9b13a5e762e6bfce4a0ce39574def5919
(the previous tier interface): JobMetadata (block_ids), JobResult (job_id, success) and
SecondaryTierManager, signatures, defaults, return annotations and abstract set as at that
commit. tests/test_vllm_engine.py pins it to a recorded table."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vllm.v1.kv_offload.base import OffloadKey, ReqContext, RequestOffloadingContext

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import OffloadingSpec

JobId = int


@dataclass
class JobMetadata:
    job_id: JobId
    keys: Collection[OffloadKey]
    block_ids: np.ndarray
    is_promotion: bool
    req_context: ReqContext


@dataclass
class JobResult:
    job_id: JobId
    success: bool


class SecondaryTierManager(ABC):
    def __init__(self, offloading_spec: "OffloadingSpec", primary_kv_view: memoryview, tier_type: str) -> None:
        self._offloading_spec = offloading_spec
        self._primary_kv_view: memoryview = primary_kv_view
        self.tier_type = tier_type

    @abstractmethod
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> bool | None:
        pass

    @abstractmethod
    def submit_store(self, job_metadata: JobMetadata) -> None:
        pass

    @abstractmethod
    def submit_load(self, job_metadata: JobMetadata) -> None:
        pass

    @abstractmethod
    def get_finished(self) -> Iterable[JobResult]:
        pass

    def touch(self, keys: Collection[OffloadKey], req_context: ReqContext):
        return

    def get_request_offloading_context(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def request_finished(self, req_context: ReqContext) -> None:
        return

    def shutdown(self) -> None:
        return
