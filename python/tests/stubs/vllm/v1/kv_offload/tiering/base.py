"""Stub of vllm-project/vllm vllm/v1/kv_offload/tiering/base.py, current (the newest stored
text): TransferJob (chunk_ids; the revision example/manager.py@033af9c5 uses calls it
JobMetadata with block_ids), JobResult (successful_keys, transfer_time), ParentManager and
SecondaryTierManager: signatures, defaults, return annotations, abstract set and default
bodies. Annotations are kept as upstream writes them (strings: the names are not resolved).
See tests/stubs/README.md; tests/test_vllm_engine.py pins this file to a recorded table."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from vllm.v1.kv_offload.base import (
    Locality,
    LookupResult,
    Medium,
    OffloadingEvent,
    OffloadingMetricMetadata,
    OffloadKey,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
)

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import OffloadingSpec

JobId = int


@dataclass
class TransferJob:
    job_id: JobId
    keys: Collection[OffloadKey]
    chunk_ids: np.ndarray
    is_promotion: bool
    req_context: ReqContext


@dataclass
class JobResult:
    job_id: JobId
    success: bool
    successful_keys: Collection[OffloadKey] | None = None
    transfer_time: float | None = None


class ParentManager(ABC):
    @abstractmethod
    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext: ...

    @abstractmethod
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult: ...

    @abstractmethod
    def create_store_job(self, keys: Collection[OffloadKey], req_context: ReqContext) -> TransferJob: ...

    @abstractmethod
    def on_request_finished(self, req_context: ReqContext) -> None: ...

    def step_begin(self) -> None:
        return

    def step_done(self) -> None:
        return


class SecondaryTierManager(ABC):
    medium: ClassVar[Medium | None] = None

    def __init__(self, offloading_spec: "OffloadingSpec", primary_kv_view: memoryview, tier_type: str) -> None:
        self._offloading_spec = offloading_spec
        self._primary_kv_view: memoryview = primary_kv_view
        self.tier_type = tier_type
        self.locality: Locality | None = None

    @abstractmethod
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        pass

    @abstractmethod
    def submit_store(self, job_metadata: TransferJob) -> None:
        pass

    @abstractmethod
    def submit_load(self, job_metadata: TransferJob) -> None:
        pass

    @abstractmethod
    def get_finished_jobs(self) -> Iterable[JobResult]:
        pass

    def has_pending_work(self) -> bool:
        return False

    def take_events(self) -> Iterable[OffloadingEvent]:
        return ()

    def touch(self, keys: Collection[OffloadKey], req_context: ReqContext):
        return

    @abstractmethod
    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        pass

    def on_request_finished(self, req_context: ReqContext) -> None:
        return

    def bind_parent(self, parent: ParentManager) -> None:
        return

    def stop_executor(self) -> None:
        return

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        return

    @abstractmethod
    def drain_jobs(self) -> None:
        pass

    def shutdown(self) -> None:
        return

    @classmethod
    def build_metric_definitions(cls, extra_config: dict[str, Any]) -> dict[str, OffloadingMetricMetadata]:
        return {}

    def get_stats(self) -> "OffloadingConnectorStats | None":
        return None
