"""Stub of vllm-project/vllm vllm/v1/kv_offload/base.py, current (the newest stored text):
OffloadKey (block hash + 4-byte big-endian group index), Medium, Locality, TierMatcher,
TierFilter, ReqContext, LookupResult (MISS, HIT, HIT_PENDING, RETRY; "HIT_PENDING if found but
not yet readable, RETRY if the lookup should be retried later"), OffloadPolicy,
RequestOffloadingContext, ScheduleEndContext, OffloadingEvent, the metric metadata types and
OffloadingManager's method set. OffloadingSpec is reduced to what a tier reads from it
(vllm_config, extra_config, kv_events_config). See tests/stubs/README.md."""

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any, ClassVar, NamedTuple, NewType

OffloadKey = NewType("OffloadKey", bytes)


def make_offload_key(block_hash: bytes, group_idx: int) -> OffloadKey:
    return OffloadKey(block_hash + group_idx.to_bytes(4, "big", signed=False))


def get_offload_block_hash(key: OffloadKey) -> bytes:
    return key[:-4]


def get_offload_group_idx(key: OffloadKey) -> int:
    return int.from_bytes(key[-4:], "big", signed=False)


class Medium(Enum):
    CPU = "CPU"
    STORAGE = "STORAGE"


class Locality(Enum):
    LOCAL = "LOCAL"
    REMOTE = "REMOTE"


class TierMatcher(NamedTuple):
    medium: "Medium | None" = None
    locality: "Locality | None" = None

    def matches(self, medium, locality) -> bool:
        return ((self.medium is None or medium is None or self.medium == medium)
                and (self.locality is None or locality is None or self.locality == locality))


@dataclass(frozen=True)
class TierFilter:
    matchers: tuple = ()
    ALL: ClassVar["TierFilter"]

    def allows(self, medium, locality) -> bool:
        if self is TierFilter.ALL:
            return True
        return any(m.matches(medium, locality) for m in self.matchers)


TierFilter.ALL = TierFilter(matchers=(TierMatcher(),))


@dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: "dict[str, Any] | None" = None
    load_tier_filter: TierFilter = TierFilter.ALL
    _state: dict = field(default_factory=dict, repr=False, init=False)

    def set_state(self, val: Any) -> None:
        self._state[type(val)] = val

    def get_state(self, cls):
        return self._state.get(cls)


class LookupResult(Enum):
    MISS = auto()
    HIT = auto()
    HIT_PENDING = auto()
    RETRY = auto()


class OffloadPolicy(Enum):
    BLOCK_LEVEL = "block_level"
    REQUEST_LEVEL = "request_level"


@dataclass
class RequestOffloadingContext:
    policy: OffloadPolicy = OffloadPolicy.BLOCK_LEVEL


class ScheduleEndContext(NamedTuple):
    new_req_ids: Collection[str]
    preempted_req_ids: Collection[str]


class LoadStoreSpec:
    pass


@dataclass
class PrepareStoreOutput:
    keys_to_store: "list[OffloadKey]"
    store_spec: LoadStoreSpec
    evicted_keys: "list[OffloadKey]"


@dataclass
class OffloadingEvent:
    keys: "list[OffloadKey]"
    medium: Medium
    removed: bool  # True if blocks are removed, False if stored
    locality: "Locality | None" = None


@dataclass(frozen=True)
class OffloadingMetricMetadata:
    documentation: str
    labelnames: "tuple[str, ...]" = ()


@dataclass(frozen=True)
class OffloadingCounterMetadata(OffloadingMetricMetadata):
    pass


@dataclass(frozen=True)
class OffloadingGaugeMetadata(OffloadingMetricMetadata):
    pass


@dataclass(frozen=True)
class OffloadingHistogramMetadata(OffloadingMetricMetadata):
    buckets: "tuple[float, ...] | None" = None


@dataclass(frozen=True)
class OffloadingKVEventsConfig:
    enable_kv_cache_events: bool
    self_describing_kv_events: bool


class OffloadingManager(ABC):
    @abstractmethod
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult: ...

    @abstractmethod
    def prepare_load(self, keys: Collection[OffloadKey], req_context: ReqContext) -> LoadStoreSpec: ...

    def touch(self, keys: Collection[OffloadKey], req_context: ReqContext):
        return

    def complete_load(self, keys: Collection[OffloadKey], req_context: ReqContext):
        return

    @abstractmethod
    def prepare_store(self, keys: Collection[OffloadKey], req_context: ReqContext) -> "PrepareStoreOutput | None": ...

    def complete_store(self, keys: Collection[OffloadKey], req_context: ReqContext, success: bool = True):
        return

    @abstractmethod
    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext: ...

    def on_request_finished(self, req_context: ReqContext) -> None:
        return

    def take_events(self) -> Iterable[OffloadingEvent]:
        return ()

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        return

    def has_pending_work(self) -> bool:
        return False

    def reset_cache(self) -> None:
        return

    def get_stats(self):
        return None

    def shutdown(self) -> None:
        return


class OffloadingSpec(ABC):
    """Reduced: what a secondary tier reads from the spec it is given."""

    def __init__(self, vllm_config: Any, extra_config: "dict | None" = None,
                 kv_events_config: "OffloadingKVEventsConfig | None" = None):
        self.vllm_config = vllm_config
        self.extra_config = extra_config or {}
        self.kv_events_config = kv_events_config or OffloadingKVEventsConfig(False, False)
