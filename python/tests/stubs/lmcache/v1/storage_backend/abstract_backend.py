"""Stub of LMCache/LMCache lmcache/v1/storage_backend/abstract_backend.py: the signatures,
defaults, return annotations, abstract set and default bodies of the newest stored text
(StorageBackendInterface with batched_async_contains, batched_get_non_blocking,
get_allocator_backend, batched_contains, touch_cache, cancel_request; AllocatorBackendInterface
with allocate(shapes, dtypes, ...) taking a torch.Size or a list of them;
StoragePluginInterface), plus batched_contains_gaps (default None: "I don't support gap
reporting") as LMCache's tests of it and of StorageManager.batched_contains_with_gaps call it.
The annotations are kept as upstream writes them (strings here: the names are not
resolved). See tests/stubs/README.md; tests/test_lmcache_engine.py pins this file to a
recorded table."""

from __future__ import annotations

import abc
import asyncio
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple, Union

import torch

from lmcache import torch_device_type
from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryAllocatorInterface, MemoryFormat, MemoryObj

if TYPE_CHECKING:
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend


class StorageBackendInterface(metaclass=abc.ABCMeta):
    def __init__(self, dst_device: str = torch_device_type):
        torch.device(dst_device)  # raises RuntimeError on an invalid device
        self.dst_device = dst_device

    @abc.abstractmethod
    def contains(self, key: CacheEngineKey, pin: bool = False) -> bool:
        raise NotImplementedError

    @abc.abstractmethod
    def exists_in_put_tasks(self, key: CacheEngineKey) -> bool:
        raise NotImplementedError

    @abc.abstractmethod
    def batched_submit_put_task(self, keys: Sequence[CacheEngineKey], objs: List[MemoryObj], transfer_spec: Any = None,
                                on_complete_callback: Optional[Callable[[CacheEngineKey], None]] = None
                                ) -> Union[List[Future], None]:
        raise NotImplementedError

    async def async_batched_submit_put_task(self, keys: Sequence[CacheEngineKey], objs: List[MemoryObj],
                                            transfer_spec: Any = None,
                                            on_complete_callback: Optional[Callable[[CacheEngineKey], None]] = None
                                            ) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def get_blocking(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        raise NotImplementedError

    def get_non_blocking(self, key: CacheEngineKey, location: Optional[str] = None) -> Optional[Future]:
        raise NotImplementedError

    async def batched_async_contains(self, lookup_id: str, keys: List[CacheEngineKey], pin: bool = False) -> int:
        raise NotImplementedError

    async def batched_get_non_blocking(self, lookup_id: str, keys: list[CacheEngineKey], transfer_spec: Any = None
                                       ) -> list[MemoryObj]:
        raise NotImplementedError

    def batched_get_blocking(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        return [self.get_blocking(k) for k in keys]

    @abc.abstractmethod
    def pin(self, key: CacheEngineKey) -> bool:
        raise NotImplementedError

    @abc.abstractmethod
    def unpin(self, key: CacheEngineKey) -> bool:
        raise NotImplementedError

    @abc.abstractmethod
    def remove(self, key: CacheEngineKey, force: bool = True) -> bool:
        raise NotImplementedError

    def batched_remove(self, keys: list[CacheEngineKey], force: bool = True) -> int:
        return sum(self.remove(k, force=force) for k in keys)

    @abc.abstractmethod
    def get_allocator_backend(self) -> "AllocatorBackendInterface":
        raise NotImplementedError

    @abc.abstractmethod
    def close(self) -> None:
        raise NotImplementedError

    def batched_contains(self, keys: List[CacheEngineKey], pin: bool = False) -> int:
        hit_chunks = 0
        for key in keys:
            if not self.contains(key, pin):
                break
            hit_chunks += 1
        return hit_chunks

    def batched_contains_gaps(self, keys: List[CacheEngineKey], pin: bool = False
                              ) -> Optional[Tuple[List[Tuple[int, int]], int]]:
        return None

    def touch_cache(self) -> None:
        raise NotImplementedError

    def cancel_request(self, req_id: str) -> None:
        return


class AllocatorBackendInterface(StorageBackendInterface):
    @abc.abstractmethod
    def initialize_allocator(self, config: Any, metadata: Any) -> MemoryAllocatorInterface:
        raise NotImplementedError

    @abc.abstractmethod
    def get_memory_allocator(self) -> MemoryAllocatorInterface:
        raise NotImplementedError

    @abc.abstractmethod
    def allocate(self, shapes: Union[torch.Size, list[torch.Size]], dtypes: Union[torch.dtype, list[torch.dtype]],
                 fmt: MemoryFormat = MemoryFormat.KV_2LTD, eviction: bool = True, busy_loop: bool = True
                 ) -> Optional[MemoryObj]:
        raise NotImplementedError

    @abc.abstractmethod
    def batched_allocate(self, shapes: Union[torch.Size, list[torch.Size]],
                         dtypes: Union[torch.dtype, list[torch.dtype]], batch_size: int,
                         fmt: MemoryFormat = MemoryFormat.KV_2LTD, eviction: bool = True, busy_loop: bool = True
                         ) -> Optional[list[MemoryObj]]:
        raise NotImplementedError

    def calculate_chunk_budget(self) -> int:
        raise NotImplementedError


class StoragePluginInterface(StorageBackendInterface):
    def __init__(self, dst_device: str = torch_device_type, config: Optional[Any] = None,
                 metadata: Optional[Any] = None, local_cpu_backend: Optional["LocalCPUBackend"] = None,
                 loop: Optional[asyncio.AbstractEventLoop] = None):
        super().__init__(dst_device=dst_device)
        self.config = config
        self.metadata = metadata
        self.local_cpu_backend = local_cpu_backend
        self.loop = loop


ConfigurableStorageBackendInterface = StoragePluginInterface
