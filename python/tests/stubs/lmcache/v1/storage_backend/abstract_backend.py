"""Stub of LMCache/LMCache lmcache/v1/storage_backend/abstract_backend.py (signatures only;
torch types become Any). See tests/stubs/README.md."""

import abc
import asyncio
from concurrent.futures import Future
from typing import Any, Callable, List, Optional, Sequence, Union

from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryObj


class StorageBackendInterface(metaclass=abc.ABCMeta):
    def __init__(self, dst_device: str = "cuda"):
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

    async def batched_get_non_blocking(self, lookup_id: str, keys: list, transfer_spec: Any = None) -> list:
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

    def batched_remove(self, keys: list, force: bool = True) -> int:
        return sum(self.remove(k, force=force) for k in keys)

    @abc.abstractmethod
    def get_allocator_backend(self) -> Any:
        raise NotImplementedError

    @abc.abstractmethod
    def close(self) -> None:
        raise NotImplementedError

    def batched_contains(self, keys: List[CacheEngineKey], pin: bool = False) -> int:
        n = 0
        for k in keys:
            if not self.contains(k, pin):
                break
            n += 1
        return n

    def touch_cache(self) -> None:
        raise NotImplementedError

    def cancel_request(self, req_id: str) -> None:
        return


class StoragePluginInterface(StorageBackendInterface):
    def __init__(self, dst_device: str = "cuda", config: Any = None, metadata: Any = None,
                 local_cpu_backend: Any = None, loop: Optional[asyncio.AbstractEventLoop] = None):
        super().__init__(dst_device=dst_device)
        self.config = config
        self.metadata = metadata
        self.local_cpu_backend = local_cpu_backend
        self.loop = loop
