"""LMCache storage plugin on kvoffload.

LMCache's interface: lmcache/v1/storage_backend/abstract_backend.py (StoragePluginInterface,
StorageBackendInterface) in LMCache/LMCache; its loader, storage_plugin_launcher in
lmcache/v1/storage_backend/__init__.py, imports
extra_config["storage_plugin.<name>.module_path"], takes "class_name" from it and calls
cls(config=, dst_device=, metadata=, local_cpu_backend=, loop=). Load it with this in the
LMCache configuration file (LMCACHE_CONFIG_FILE):

    storage_plugins: ["kvoffload"]
    extra_config:
      storage_plugin.kvoffload.module_path: kvoffload.lmcache
      storage_plugin.kvoffload.class_name: KVOffloadBackend
      storage_plugin.kvoffload.addrs: "127.0.0.1:7101,127.0.0.1:7102"

Mapping: a CacheEngineKey is stored under "lmcache/" + key.to_string(); the value is a small
header (magic, length, JSON of the MemoryObj's shape, dtype and format) followed by the
MemoryObj's bytes (byte_array). batched_submit_put_task sends the batch as one transaction on
a worker thread and returns its futures; contains / batched_async_contains are BatchExists
(the prefix count for the batched form), pin is BatchExists with a lease of pin_lease seconds
(storage_plugin.kvoffload.pin_lease, default 60) which expires by itself (unpin returns True
and leaves it to expire); get_blocking reads the value, allocates a MemoryObj of the recorded
shape, dtype and format from the local CPU backend and fills it; remove / batched_remove are
Remove. The engine is imported only when KVOffloadBackend is first used.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, List, Optional, Sequence

from . import _engine
from .client import Client
from .types import Presence, new_txn_id

logger = logging.getLogger(__name__)

__all__ = ["KVOffloadBackend", "encode", "decode_header"]

_MAGIC = b"KVO1"
_PREFIX = "lmcache/"


def encode(shape: Sequence[int], dtype: Any, fmt: Any, payload: memoryview) -> bytes:
    """The stored value: magic, u32 header length, JSON header, payload."""
    head = json.dumps({"shape": [int(s) for s in shape], "dtype": str(dtype),
                       "fmt": int(getattr(fmt, "value", fmt))}, separators=(",", ":")).encode()
    return b"".join((_MAGIC, struct.pack("<I", len(head)), head, payload))


def decode_header(v: memoryview):
    """(header dict, payload memoryview) of a stored value."""
    if bytes(v[:4]) != _MAGIC:
        raise ValueError("not a kvoffload LMCache value (bad magic)")
    (n,) = struct.unpack("<I", bytes(v[4:8]))
    return json.loads(bytes(v[8:8 + n])), v[8 + n:]


def _dtype(name: str) -> Any:
    if name.startswith("torch."):
        import torch

        return getattr(torch, name[len("torch."):])
    import numpy

    return numpy.dtype(name)


class _KVOffloadBackend:
    def __init__(self, dst_device: str = "cpu", config: Any = None, metadata: Any = None,
                 local_cpu_backend: Any = None, loop: Optional[asyncio.AbstractEventLoop] = None, *,
                 client: Optional[Client] = None, name: str = "kvoffload"):
        self._base_init(dst_device=dst_device, config=config, metadata=metadata,
                        local_cpu_backend=local_cpu_backend, loop=loop)
        extra = dict(getattr(config, "extra_config", None) or {})
        prefix = f"storage_plugin.{name}."
        self.client = client or _engine.client_from(extra, prefix)
        self.pin_lease = float(extra.get(prefix + "pin_lease", 60.0))
        self._pool = ThreadPoolExecutor(max_workers=int(extra.get(prefix + "workers", 4)),
                                        thread_name_prefix="kvoffload-lmcache")
        self._lock = threading.Lock()
        self._putting: set = set()

    def _base_init(self, **kw: Any) -> None:
        try:
            super().__init__(**kw)  # StoragePluginInterface.__init__
        except TypeError:
            for k, v in kw.items():
                setattr(self, k, v)

    def __str__(self) -> str:
        return "KVOffloadBackend"

    @staticmethod
    def _k(key: Any) -> str:
        return _PREFIX + (key.to_string() if hasattr(key, "to_string") else str(key))

    # -- lookups -------------------------------------------------------------------------

    def contains(self, key: Any, pin: bool = False) -> bool:
        return self.batched_contains([key], pin) == 1

    def batched_contains(self, keys: List[Any], pin: bool = False) -> int:
        try:
            return self.client.batch_exists([self._k(k) for k in keys], self.pin_lease if pin else 0).prefix_present
        except Exception as e:
            logger.warning("kvoffload: contains failed: %s", e)
            return 0

    async def batched_async_contains(self, lookup_id: str, keys: List[Any], pin: bool = False) -> int:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.batched_contains, keys, pin)

    def exists_in_put_tasks(self, key: Any) -> bool:
        with self._lock:
            return self._k(key) in self._putting

    def pin(self, key: Any) -> bool:
        return self.contains(key, pin=True)

    def unpin(self, key: Any) -> bool:
        return True  # the lease taken by pin expires by itself

    # -- puts ----------------------------------------------------------------------------

    def batched_submit_put_task(self, keys: Sequence[Any], objs: List[Any], transfer_spec: Any = None,
                                on_complete_callback: Optional[Callable[[Any], None]] = None) -> Optional[List[Future]]:
        skeys = [self._k(k) for k in keys]
        for o in objs:
            if hasattr(o, "ref_count_up"):
                o.ref_count_up()
        with self._lock:
            self._putting.update(skeys)
        fut = self._pool.submit(self._put, list(keys), skeys, objs, on_complete_callback)
        return [fut]

    def _put(self, keys, skeys, objs, cb) -> bool:
        try:
            vals = [encode(o.get_shape(), o.get_dtype(), o.get_memory_format(), _engine.view_of(o.byte_array))
                    for o in objs]
            res = self.client.batch_offload(new_txn_id(), list(zip(skeys, vals)))
            for k, r in zip(keys, res):
                if r.ok:
                    if cb is not None:
                        try:
                            cb(k)
                        except Exception as e:  # as LMCache: callback errors are logged
                            logger.error("kvoffload: put callback failed: %s", e)
                else:
                    logger.error("kvoffload: put of %s: %s %s: %s", r.key, r.outcome.name, r.code, r.reason)
            return all(r.ok for r in res)
        except Exception as e:
            logger.error("kvoffload: put of %d chunks failed: %s", len(keys), e)
            return False
        finally:
            with self._lock:
                self._putting.difference_update(skeys)
            for o in objs:
                if hasattr(o, "ref_count_down"):
                    o.ref_count_down()

    async def async_batched_submit_put_task(self, keys, objs, transfer_spec=None, on_complete_callback=None) -> None:
        futs = self.batched_submit_put_task(keys, objs, transfer_spec, on_complete_callback) or []
        await asyncio.gather(*(asyncio.wrap_future(f) for f in futs))

    # -- gets ----------------------------------------------------------------------------

    def get_blocking(self, key: Any) -> Optional[Any]:
        return self.batched_get_blocking([key])[0]

    def batched_get_blocking(self, keys: List[Any]) -> List[Optional[Any]]:
        try:
            got = self.client.batch_get([self._k(k) for k in keys])
        except Exception as e:
            logger.error("kvoffload: get of %d chunks failed: %s", len(keys), e)
            return [None] * len(keys)
        return [self._memory_obj(g.value) if g.ok else None for g in got]

    def _memory_obj(self, value: bytes) -> Optional[Any]:
        head, payload = decode_header(memoryview(value))
        alloc = self.local_cpu_backend
        if alloc is None:
            logger.error("kvoffload: no local CPU backend to allocate a MemoryObj from")
            return None
        from lmcache.v1.memory_management import MemoryFormat

        obj = alloc.allocate(tuple(head["shape"]), _dtype(head["dtype"]), MemoryFormat(head["fmt"]))
        if obj is None:
            return None
        dst = _engine.view_of(obj.byte_array)
        if dst.nbytes < payload.nbytes:
            logger.error("kvoffload: stored chunk of %d bytes does not fit the %d allocated", payload.nbytes, dst.nbytes)
            return None
        dst[:payload.nbytes] = payload
        return obj

    def get_non_blocking(self, key: Any, location: Optional[str] = None) -> Optional[Future]:
        return self._pool.submit(self.get_blocking, key)

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[Any], transfer_spec: Any = None) -> List[Any]:
        loop = asyncio.get_running_loop()
        objs = await loop.run_in_executor(self._pool, self.batched_get_blocking, keys)
        out = []
        for o in objs:  # the prefix that was found, as LMCache's backends return
            if o is None:
                break
            out.append(o)
        return out

    def submit_prefetch_task(self, key: Any) -> bool:
        return self.contains(key)

    # -- removal and lifecycle -----------------------------------------------------------

    def remove(self, key: Any, force: bool = True) -> bool:
        return self.batched_remove([key], force) == 1

    def batched_remove(self, keys: List[Any], force: bool = True) -> int:
        try:
            return sum(r.removed for r in self.client.remove([self._k(k) for k in keys]))
        except Exception as e:
            logger.error("kvoffload: remove of %d chunks failed: %s", len(keys), e)
            return 0

    def get_allocator_backend(self) -> Any:
        return self.local_cpu_backend

    def touch_cache(self) -> None:
        return None

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.client.close()


_cls = None


def __getattr__(name: str):
    global _cls
    if name == "KVOffloadBackend":
        if _cls is None:
            from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface

            _cls = type("KVOffloadBackend", (_KVOffloadBackend, StoragePluginInterface),
                        {"__module__": __name__, "__doc__": __doc__})
        return _cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
