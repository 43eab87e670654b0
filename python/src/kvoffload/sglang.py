"""SGLang HiCache storage backend (L3) on kvoffload.

SGLang's interface: python/sglang/srt/mem_cache/hicache_storage.py (HiCacheStorage) in
sgl-project/sglang; its dynamic loader, python/sglang/srt/mem_cache/storage/backend_factory.py,
imports module_path, checks issubclass(cls, HiCacheStorage) and calls
cls(storage_config, kwargs). Load it with

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
      --hicache-storage-backend dynamic \\
      --hicache-storage-backend-extra-config '{"backend_name": "kvoffload", "module_path": "kvoffload.sglang", "class_name": "HiCacheKVOffload", "addrs": "127.0.0.1:7101,127.0.0.1:7102"}'

Mapping: each page key (a hex SHA-256 page hash, chained by SGLang) gets the suffix SGLang's
file backend uses (model name, TP rank and size unless MLA, PP size and rank when PP > 1); the
zero-copy v1 calls move a page's K and V halves as two objects, "<key><suffix>_k" and
"_v" (one, "_k", for MLA), straight between the host pool's memory
(mem_pool_host.get_page_buffer_meta pointers) and the wire; a batch (up to 128 pages) is one
kvoffload transaction. There is no exists-then-put step: an already stored page answers
AlreadyStored, a page being stored by another rank is joined (single flight), and a Conflict
(the same key with other bytes: a key scheme missing the dtype, say) is logged as an error and
reported False, never silently overwritten. batch_exists counts the leading pages whose parts
are all Present. The engine is imported only when HiCacheKVOffload is first used.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, List, Optional

from . import _engine
from .client import Client
from .types import GetStatus, Outcome, Presence, new_txn_id

logger = logging.getLogger(__name__)

__all__ = ["HiCacheKVOffload"]


class _HiCacheKVOffload:
    """The implementation; HiCacheKVOffload is this class with SGLang's HiCacheStorage as
    its base (made on first use, so importing kvoffload.sglang does not import sglang)."""

    def __init__(self, storage_config: Any = None, kwargs: Optional[dict] = None, *, client: Optional[Client] = None):
        cfg = dict(getattr(storage_config, "extra_config", None) or {})
        self.storage_config = storage_config
        self.client = client or _engine.client_from(cfg)
        model = getattr(storage_config, "model_name", None) or ""
        model = "-".join(model.split("/"))
        self.is_mla = bool(getattr(storage_config, "is_mla_model", False))
        suffix = f"_{model}"
        if not self.is_mla:
            suffix += f"_{getattr(storage_config, 'tp_rank', 0)}_{getattr(storage_config, 'tp_size', 1)}"
        if getattr(storage_config, "pp_size", 1) > 1:
            suffix += f"_{storage_config.pp_size}_{storage_config.pp_rank}"
        if getattr(storage_config, "attn_cp_size", 1) > 1:
            suffix += f"_cp{storage_config.attn_cp_rank}_{storage_config.attn_cp_size}"
        self.suffix = suffix
        self.mem_pool_host = None
        self._lock = threading.Lock()
        self._stats = {"pages_set": 0, "pages_get": 0, "set_failed": 0, "get_failed": 0, "conflicts": 0}

    def _count(self, **kw: int) -> None:
        with self._lock:
            for k, v in kw.items():
                self._stats[k] += v

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host

    # -- keys ----------------------------------------------------------------------------

    def _key(self, key: str) -> str:
        return key + self.suffix

    def _parts(self) -> List[str]:
        return ["_k"] if self.is_mla else ["_k", "_v"]

    def _part_keys(self, keys: List[str]) -> List[str]:
        return [self._key(k) + p for k in keys for p in self._parts()]

    def _page_views(self, keys: List[str], host_indices: Any) -> List[List[memoryview]]:
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        per = len(ptrs) // max(len(keys), 1)
        if per * len(keys) != len(ptrs) or per != len(self._parts()):
            raise ValueError(f"{len(ptrs)} buffers for {len(keys)} pages ({len(self._parts())} per page expected)")
        views = [_engine.ptr_view(p, s) for p, s in zip(ptrs, sizes)]
        return [views[i * per:(i + 1) * per] for i in range(len(keys))]

    # -- zero-copy v1 ------------------------------------------------------------------

    def batch_set_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        if not keys:
            return []
        try:
            pages = self._page_views(keys, host_indices)
            views = [v for page in pages for v in page]
            res = self.client.batch_offload(new_txn_id(), list(zip(self._part_keys(keys), views)))
        except Exception as e:
            logger.error("kvoffload: batch_set_v1 of %d pages failed: %s", len(keys), e)
            self._count(set_failed=len(keys))
            return [False] * len(keys)
        return self._page_ok(keys, res)

    def _page_ok(self, keys: List[str], res) -> List[bool]:
        per = len(self._parts())
        out = []
        for i in range(len(keys)):
            rs = res[i * per:(i + 1) * per]
            for r in rs:
                if r.outcome == Outcome.CONFLICT:
                    logger.error("kvoffload: key %s holds other bytes (%s: %s): the key scheme is missing something",
                                 r.key, r.code.name if hasattr(r.code, "name") else r.code, r.reason)
                    self._count(conflicts=1)
            out.append(all(r.ok for r in rs))
        self._count(pages_set=sum(out), set_failed=len(out) - sum(out))
        return out

    def batch_get_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        if not keys:
            return []
        try:
            pages = self._page_views(keys, host_indices)
            bufs = [v for page in pages for v in page]
            got = self.client.batch_get_into(self._part_keys(keys), bufs)
        except Exception as e:
            logger.error("kvoffload: batch_get_v1 of %d pages failed: %s", len(keys), e)
            self._count(get_failed=len(keys))
            return [False] * len(keys)
        per = len(self._parts())
        out = [all(g.status == GetStatus.FOUND and g.size == bufs[i * per + j].nbytes
                   for j, g in enumerate(got[i * per:(i + 1) * per])) for i in range(len(keys))]
        self._count(pages_get=sum(out), get_failed=len(out) - sum(out))
        return out

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        if not keys:
            return 0
        try:
            ex = self.client.batch_exists(self._part_keys(keys))
        except Exception as e:
            logger.warning("kvoffload: batch_exists failed: %s", e)
            return 0
        per = len(self._parts())
        n = 0
        for i in range(len(keys)):
            if not all(p == Presence.PRESENT for p in ex.keys[i * per:(i + 1) * per]):
                break
            n += 1
        return n

    # -- the generic (copying) interface -----------------------------------------------

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        return self.batch_get([key], [target_location] if target_location is not None else None)[0]

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> List[Any]:
        skeys = [self._key(k) for k in keys]
        try:
            if target_locations is None:
                return [g.value if g.ok else None for g in self.client.batch_get(skeys)]
            bufs = [_engine.view_of(t) for t in target_locations]
            got = self.client.batch_get_into(skeys, bufs)
        except Exception as e:
            logger.error("kvoffload: batch_get of %d keys failed: %s", len(keys), e)
            return [None] * len(keys)
        return [t if g.ok and g.size == b.nbytes else None for g, t, b in zip(got, target_locations, bufs)]

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None) -> bool:
        try:
            res = self.client.batch_offload(new_txn_id(), [(self._key(k), _engine.view_of(v)) for k, v in zip(keys, values)])
        except Exception as e:
            logger.error("kvoffload: batch_set of %d keys failed: %s", len(keys), e)
            return False
        for r in res:
            if r.outcome == Outcome.CONFLICT:
                logger.error("kvoffload: key %s holds other bytes: %s", r.key, r.reason)
        return all(r.ok for r in res)

    def exists(self, key: str) -> bool:
        try:
            return self.client.batch_exists([self._key(key)]).keys[0] == Presence.PRESENT
        except Exception as e:
            logger.warning("kvoffload: exists failed: %s", e)
            return False

    def clear(self) -> None:
        # kvoffload has no "remove everything" and no key listing; pages are removed by the
        # store's eviction (docs/operations.md) or by Remove of known keys.
        logger.info("kvoffload: clear() leaves the store's keys in place")

    def get_stats(self):
        with self._lock:
            return dict(self._stats)

    def close(self) -> None:
        self.client.close()


_cls = None


def __getattr__(name: str):
    global _cls
    if name == "HiCacheKVOffload":
        if _cls is None:
            from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

            _cls = type("HiCacheKVOffload", (_HiCacheKVOffload, HiCacheStorage),
                        {"__module__": __name__, "__doc__": _HiCacheKVOffload.__doc__})
        return _cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
