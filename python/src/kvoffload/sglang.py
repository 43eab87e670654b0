"""SGLang HiCache storage backend (L3) on kvoffload.

Upstream, as read (sgl-project/sglang; UPSTREAM_COMMIT is the interface this follows):

- 001067fffe33427bee0ed2f007fb7551a1d76b44: python/sglang/srt/mem_cache/hicache_storage.py
  (HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo, PoolName, PoolHitPolicy,
  PoolTransfer, PoolTransferResult, STORAGE_BATCH_SIZE, and HiCacheFile's keys),
  storage/backend_factory.py (the "dynamic" loader: cls(storage_config, kwargs)) and
  managers/cache_controller.py (attach_storage_backend, _page_backup, _storage_hit_query,
  _page_transfer, _page_transfer_kv_batch, _page_get_zero_copy / _page_set_zero_copy,
  _generic_page_get / _generic_page_set);
- the versions the index held of: mem_cache/hybrid_cache/hybrid_cache_controller.py at
  00343773d3293d382f0b39101f36b656d30ad2f0 (the v2 calls: register_mem_host_pool_v2,
  batch_set_v2 before the KV backup, batch_exists_v2 for the hit query, batch_get_v2 for
  sidecar pools); mem_cache/pool_host/mha.py at 0047d999bb3a3ad311df5a4b6356bfb5586e0d66 (MHA
  and MLA host pools: get_page_buffer_meta, get_data_page, get_dummy_flat_data_page,
  set_from_flat_data_page per layout); mem_cache/pool_host/mamba.py at
  02f0c2a0f8e4540dd6484b74f3d5b4ea4509f206; storage/mooncake_store/mooncake_store.py at
  00fe477f32b3878f64d44cc36895e1de4a113afe (a v2 backend: restorable prefixes).

Loading (python/README.md has the flags):

    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
    '{"backend_name": "kvoffload", "module_path": "kvoffload.sglang",
      "class_name": "HiCacheKVOffload", "interface_v1": 1, "addrs": "host:port,..."}'

Rules and invariants:

1. One object layout per page, whichever path SGLang takes. SGLang moves pages through the
   zero-copy v1 calls (batch_set_v1 / batch_get_v1 with host indices) only when the extra
   config carries a truthy interface_v1, and otherwise through batch_set / batch_get with
   flat page tensors (get_data_page(flat=True), get_dummy_flat_data_page); the hit query is
   batch_exists (or batch_exists_v2) either way. A page of a pool is kept as its parts, in the
   order of the pool's flat page: the K and V halves of an MHA page ("_k", "_v"), the one
   latent part of an MLA page ("_k"), the buffers get_page_buffer_meta gives per page of a
   sidecar pool ("_0", "_1", ...: Mamba's temporal then conv states). Every call names and
   cuts a page the same way, so exists, get and set agree on every path: a page written by
   one path is found and read by the other, byte for byte.
2. Zero copy when the pool allows it: a pool whose get_page_buffer_meta gives exactly the
   parts of a page (page_first, page_first_direct, page_head) is sent from and read into the
   host memory those pointers name; a pool that cannot (layer_first: 2 x layers buffers per
   page; MLA layer_first raises) is copied through get_data_page / set_from_flat_data_page,
   into the same objects. register_mem_pool_host and register_mem_host_pool_v2 decide this
   once per pool (a probe of page 0's metadata), and log it.
3. Keys: <page hash><suffix><format><part>. The suffix is HiCacheFile's:
   _<model> then _<tp_rank>_<tp_size> unless MLA (MLA KV is replicated over TP: rank 0
   writes it, every rank reads it), _<pp_size>_<pp_rank> with PP, _cp<rank>_<size> with
   attention CP. A sidecar pool's page is "<hash>.<pool>" + suffix (HiCacheFile's component
   key); the Mamba pool, which is TP-sharded even under MLA (the hybrid controller's
   should_backup), always carries the TP part. The format is _<layout>_<dtype> of the KV host
   pool (when it has them): a page's bytes depend on both, so instances with another
   --hicache-mem-layout or KV dtype never read each other's bytes as their own.
   A part larger than one object (MaxObjectBytes, 64 MiB) is cut into pieces "<part>.0",
   "<part>.1", ...
4. Batches: SGLang calls with up to STORAGE_BATCH_SIZE (128) pages. A call's objects go in
   as few transactions as the store's limits allow (MaxBatchKeys 4096, MaxBatchBytes 1 GiB
   each); a page is True only when every one of its objects is Stored or AlreadyStored (set)
   or Found with the page's size (get). There is no exists-then-put step: AlreadyStored is
   success, a key being stored by another rank is joined (single flight), and a Conflict (the
   same key with other bytes) is logged as an error and reported False, never overwritten.
5. batch_exists counts the leading pages whose objects are all Present. batch_exists_v2
   follows HiCacheFile's per-pool hit policies (ALL_PAGES: every page of the KV prefix;
   TRAILING_PAGES: the last len(transfer.keys) pages before the stop point) over one
   BatchExists, and answers the longest prefix every pool can restore (Mooncake's restorable
   set; HiCacheFile's minimum of the pools' boundaries can name a stop point a trailing pool
   has a hole at).
6. Nothing raises into SGLang's storage threads (an exception there stops HiCache's L3 for
   the life of the process): a failed call is logged and answered False / 0. A wrong or
   missing setting is refused at start-up instead (the factory's constructor call): no
   "addrs", an unknown key, an interface_v1 that is neither 0 nor 1, no model name, heads
   split over heterogeneous TP (tp_lcm_size), an unreachable store. A missing interface_v1 is
   not an error (rule 1) but is logged: the copying path costs a copy per page.

7. Presence hint (opt-in: "presence_hint": true, "hint_max_stale" seconds, 1.0 by default;
   SGLang #18334 asks for L3 existence without a call per request): batch_exists and
   batch_exists_v2 answer from hint.PresenceHint, the stored keys of this model (keys with
   the config suffix) kept from the key event stream, while it is at most hint_max_stale old,
   and ask BatchExists (the authority) otherwise. A page removed less than hint_max_stale ago
   may be counted (its get then fails and SGLang reports the miss); one stored as recently
   may not (it is computed).

The engine is imported only when HiCacheKVOffload is first used (import kvoffload.sglang
imports neither sglang nor torch).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _engine
from .client import Client
from .hint import PresenceHint
from .types import MAX_BATCH_BYTES, MAX_BATCH_KEYS, MAX_OBJECT_BYTES, GetStatus, Outcome, Presence, new_txn_id

logger = logging.getLogger(__name__)

__all__ = ["HiCacheKVOffload", "UPSTREAM_COMMIT", "OPTIONS", "SGLANG_OPTIONS"]

UPSTREAM_COMMIT = "001067fffe33427bee0ed2f007fb7551a1d76b44"

# The store's limits on one object and one transaction (types.py); module attributes so a
# test can lower them to exercise pieces and split transactions with small pages.
_MAX_OBJECT = MAX_OBJECT_BYTES
_MAX_TXN_BYTES = MAX_BATCH_BYTES
_MAX_TXN_KEYS = MAX_BATCH_KEYS

KV = "kv"  # PoolName.KV's value
_RANK_SHARDED = frozenset({"mamba"})

# The extra-config keys this backend reads (python/README.md), and those SGLang itself reads
# from the same dictionary (backend_factory.py: backend_name, module_path, class_name;
# cache_controller.py: interface_v1, tp_lcm_size; hiradix / hybrid controller
# parse_storage_backend_extra_config: the prefetch_* keys, hicache_storage_pass_prefix_keys).
OPTIONS = ("addrs", "timeout", "token", "token_file", "tls_ca", "insecure_token", "local", "presence_hint",
           "hint_max_stale")
SGLANG_OPTIONS = ("backend_name", "module_path", "class_name", "interface_v1", "tp_lcm_size", "prefetch_threshold",
                  "prefetch_timeout_base", "prefetch_timeout_per_ki_token", "hicache_storage_pass_prefix_keys")


def _name(pool_name: Any) -> str:
    """A PoolName (a str enum) or a plain string, as the string value."""
    return str(getattr(pool_name, "value", pool_name))


def _pieces(size: int) -> int:
    return max(1, math.ceil(size / _MAX_OBJECT))


def _split(view: memoryview) -> List[memoryview]:
    """view cut into pieces of at most _MAX_OBJECT bytes (one piece when it fits)."""
    if view.nbytes <= _MAX_OBJECT:
        return [view]
    return [view[i:i + _MAX_OBJECT] for i in range(0, view.nbytes, _MAX_OBJECT)]


def _count_of(indices: Any) -> int:
    return int(indices.numel()) if hasattr(indices, "numel") else len(indices)


class _Indices(list):
    """Host indices for a probe without torch (upstream calls indices.tolist())."""

    def tolist(self):
        return list(self)


def _arange(n: int) -> Any:
    try:
        import torch
    except ImportError:
        return _Indices(range(n))
    return torch.arange(n, dtype=torch.int64)


def _txns(sizes: Sequence[int]) -> List[Tuple[int, int]]:
    """[lo, hi) ranges of consecutive objects, each within _MAX_TXN_KEYS keys and
    _MAX_TXN_BYTES bytes (an object alone is at most _MAX_OBJECT, so every range has one)."""
    out, lo, total = [], 0, 0
    for i, s in enumerate(sizes):
        if i > lo and (i - lo >= _MAX_TXN_KEYS or total + s > _MAX_TXN_BYTES):
            out.append((lo, i))
            lo, total = i, 0
        total += s
    if lo < len(sizes):
        out.append((lo, len(sizes)))
    return out


class _Format:
    """How a page of one host pool is kept (rule 1): its parts (tags, sizes in bytes, in the
    order of the pool's flat page), each cut into pieces of at most _MAX_OBJECT bytes, one
    object per piece. zero_copy: the pool's get_page_buffer_meta gives exactly these parts.
    sizes is None only for the KV format before a host pool is registered (parts then split a
    flat page evenly)."""

    def __init__(self, tags: List[str], sizes: Optional[List[int]], zero_copy: bool, page_size: int,
                 pool: Any = None, why: str = ""):
        self.tags, self.sizes = list(tags), (list(sizes) if sizes is not None else None)
        self.zero_copy, self.page_size, self.pool, self.why = zero_copy, page_size, pool, why

    def names(self) -> List[str]:
        """The object name endings of one page, in byte order."""
        if self.sizes is None:
            return list(self.tags)
        out: List[str] = []
        for tag, size in zip(self.tags, self.sizes):
            n = _pieces(size)
            out += [tag] if n == 1 else [f"{tag}.{j}" for j in range(n)]
        return out

    def cut(self, view: memoryview) -> List[memoryview]:
        """One page's flat bytes as its pieces (names() order)."""
        if self.sizes is None:
            n = len(self.tags)
            if view.nbytes % n:
                raise ValueError(f"a page of {view.nbytes} bytes does not split into {n} equal parts")
            step = view.nbytes // n
            return [view[i * step:(i + 1) * step] for i in range(n)]
        if view.nbytes != sum(self.sizes):
            raise ValueError(f"a page of {view.nbytes} bytes; the host pool's pages are {sum(self.sizes)} bytes")
        out, off = [], 0
        for s in self.sizes:
            out += _split(view[off:off + s])
            off += s
        return out

    def cut_any(self, view: memoryview) -> Tuple[List[str], List[memoryview]]:
        """(object name endings, pieces) of a flat value handed to the generic calls: a page
        of this pool as cut(); a value of another size (set / get of a non-page value)
        split evenly into the parts, without pieces."""
        if self.sizes is not None and view.nbytes == sum(self.sizes):
            return self.names(), self.cut(view)
        return list(self.tags), _Format(self.tags, None, False, self.page_size).cut(view)

    def describe(self) -> str:
        how = "zero-copy (get_page_buffer_meta)" if self.zero_copy else f"copied (get_data_page: {self.why})"
        sizes = "?" if self.sizes is None else "+".join(str(s) for s in self.sizes)
        return f"{len(self.tags)} part(s) {''.join(self.tags)} of {sizes} bytes per page of {self.page_size}, {how}"


def _check_config(cfg: dict, storage_config: Any, have_client: bool) -> None:
    """Refuses, at start-up, a configuration that would not work or would not find its pages
    (rule 6)."""
    unknown = sorted(set(cfg) - set(OPTIONS) - set(SGLANG_OPTIONS))
    if unknown:
        raise ValueError(f"kvoffload.sglang: unknown key(s) {unknown} in --hicache-storage-backend-extra-config; "
                         f"kvoffload reads {list(OPTIONS)} and SGLang reads {list(SGLANG_OPTIONS)} (python/README.md)")
    if not cfg.get("addrs") and not have_client:
        raise ValueError('kvoffload.sglang: no "addrs" in --hicache-storage-backend-extra-config: give the store\'s '
                         'members, "host:port,host:port" (their --api-addr), or a node\'s "unix:///PATH" local socket')
    v1 = cfg.get("interface_v1")
    if v1 is not None and (isinstance(v1, str) or v1 not in (0, 1)):
        raise ValueError(f"kvoffload.sglang: interface_v1 is {v1!r}; write 1 (zero-copy batch_set_v1 / batch_get_v1) "
                         f"or 0 as a JSON number or boolean (SGLang takes any non-empty string as true)")
    if not getattr(storage_config, "model_name", None):
        raise ValueError("kvoffload.sglang: the storage config has no model_name: pages of different models would "
                         "share keys (start SGLang with --served-model-name, or the model path, set)")
    if getattr(storage_config, "should_split_heads", False):
        raise ValueError("kvoffload.sglang: tp_lcm_size (KV heads split for heterogeneous TP, layout page_head) is not "
                         "supported: drop tp_lcm_size from the extra config")


def _suffix(sc: Any, with_tp: bool) -> str:
    """HiCacheFile's config suffix (hicache_storage.py at UPSTREAM_COMMIT), the TP part
    forced when with_tp."""
    model = getattr(sc, "model_name", None) or ""
    out = "_" + "-".join(model.split("/"))
    if with_tp or not getattr(sc, "is_mla_model", False):
        out += f"_{getattr(sc, 'tp_rank', 0)}_{getattr(sc, 'tp_size', 1)}"
    if getattr(sc, "pp_size", 1) > 1:
        out += f"_{sc.pp_size}_{sc.pp_rank}"
    if getattr(sc, "attn_cp_size", 1) > 1:
        out += f"_cp{sc.attn_cp_rank}_{sc.attn_cp_size}"
    return out


def _format_tag(pool: Any) -> str:
    """_<layout>_<dtype> of a host pool, each when the pool has it (rule 3)."""
    out = ""
    layout = getattr(pool, "layout", None)
    if isinstance(layout, str) and layout:
        out += "_" + layout
    dtype = getattr(pool, "dtype", None)
    if dtype is not None:
        out += "_" + str(dtype).replace("torch.", "")
    return out


class _HiCacheKVOffload:
    """The implementation; HiCacheKVOffload is this class with SGLang's HiCacheStorage as
    its base (made on first use, so importing kvoffload.sglang does not import sglang)."""

    def __init__(self, storage_config: Any = None, kwargs: Optional[dict] = None, *, client: Optional[Client] = None):
        cfg = dict(getattr(storage_config, "extra_config", None) or {})
        if storage_config is not None:
            _check_config(cfg, storage_config, client is not None)
        self.storage_config = storage_config
        self.interface_v1 = bool(cfg.get("interface_v1", 0))
        self.is_mla = bool(getattr(storage_config, "is_mla_model", False))
        self.suffix = _suffix(storage_config, False)
        self.sharded_suffix = _suffix(storage_config, True)
        self.client = client or _engine.client_from(cfg)
        self.hint: Optional[PresenceHint] = None
        if cfg.get("presence_hint"):
            suffix = self.suffix
            self.hint = PresenceHint(self.client, key_filter=lambda k: suffix in k,
                                     max_stale=float(cfg.get("hint_max_stale", 1.0)), name="kvoffload-sglang-hint")
        self.mem_pool_host = None
        self.registered_pools: Dict[Any, Any] = {}
        self._formats: Dict[str, _Format] = {}
        self._tag = ""
        self._lock = threading.Lock()
        self._stats = {"pages_set": 0, "pages_get": 0, "set_failed": 0, "get_failed": 0, "conflicts": 0,
                       "pages_copied": 0, "generic_set": 0, "generic_get": 0, "hint_answers": 0}
        if storage_config is not None and not self.interface_v1:
            logger.warning('kvoffload: "interface_v1" is not in the extra config: SGLang moves pages with '
                           'batch_set / batch_get, a copy of each page; add "interface_v1": 1 for the zero-copy '
                           'batch_set_v1 / batch_get_v1 (both find the same pages)')

    def _count(self, **kw: int) -> None:
        with self._lock:
            for k, v in kw.items():
                self._stats[k] += v

    # -- host pools ------------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any):
        """The KV host pool (the controller's storage_host_pool): fixes the format tag and how
        a KV page is moved (rules 2 and 3). Raises when the pool offers no way to move a page."""
        fmt = self._probe(mem_pool_host, KV)
        self.mem_pool_host = mem_pool_host
        self._tag = _format_tag(mem_pool_host)
        self._formats[KV] = fmt
        if self.interface_v1 and not fmt.zero_copy:
            logger.warning("kvoffload: interface_v1 is set but the host pool's layout %r gives no per-part page "
                           "buffers (%s): batch_set_v1 / batch_get_v1 copy each page (--hicache-mem-layout "
                           "page_first is zero-copy)", getattr(mem_pool_host, "layout", None), fmt.why)
        logger.info("kvoffload: KV pages %s", fmt.describe())

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name):
        """A hybrid model's host pool (HybridCacheController.attach_storage_backend registers
        every entry, the KV anchor included); batch_*_v2 resolve PoolTransfer.name here."""
        self.registered_pools[host_pool_name] = host_pool
        name = _name(host_pool_name)
        if name == KV:
            if self.mem_pool_host is None:
                self.register_mem_pool_host(host_pool)
            return
        self._formats[name] = fmt = self._probe(host_pool, name)
        logger.info("kvoffload: %s pages %s", name, fmt.describe())

    def _probe(self, pool: Any, name: str) -> _Format:
        ps = int(getattr(pool, "page_size", 1) or 1)
        want = (1 if self.is_mla else 2) if name == KV else None
        meta: Optional[List[int]] = None
        why = ""
        if hasattr(pool, "get_page_buffer_meta"):
            try:
                ptrs, sizes = pool.get_page_buffer_meta(_arange(ps))
                meta = [int(s) for s in sizes]
                if len(ptrs) != len(meta) or not meta:
                    why, meta = f"get_page_buffer_meta gave {len(ptrs)} pointers and {len(meta)} sizes", None
            except Exception as e:  # noqa: BLE001 - a layout without page buffers (MLA layer_first)
                why = f"get_page_buffer_meta: {e}"
        else:
            why = "no get_page_buffer_meta"
        flat: Optional[int] = None
        if hasattr(pool, "get_dummy_flat_data_page"):
            try:
                d = pool.get_dummy_flat_data_page()
                flat = int(d.numel() * d.element_size())
            except Exception as e:  # noqa: BLE001
                why += f"; get_dummy_flat_data_page: {e}"
        tags = (lambda n: ["_k", "_v"][:n]) if name == KV else (lambda n: [f"_{i}" for i in range(n)])
        if meta and (want is None or len(meta) == want) and (flat is None or sum(meta) == flat):
            return _Format(tags(len(meta)), meta, True, ps, pool)
        if meta:
            why = (f"{len(meta)} buffers of {sum(meta)} bytes per page where a page is "
                   f"{want or 'its'} part(s) of {flat} bytes")
        if flat is None or not hasattr(pool, "get_data_page") or not hasattr(pool, "set_from_flat_data_page"):
            raise ValueError(f"kvoffload: the {name} host pool ({type(pool).__name__}) offers neither a page's buffers "
                             f"(get_page_buffer_meta) nor flat pages (get_data_page): {why}")
        n = want or 1
        if flat % n:
            raise ValueError(f"kvoffload: the {name} host pool's page of {flat} bytes does not split into {n} parts")
        return _Format(tags(n), [flat // n] * n, False, ps, pool, why)

    def _format(self, name: str) -> _Format:
        fmt = self._formats.get(name)
        if fmt is None:
            if name == KV:
                raise ValueError("no KV host pool: register_mem_pool_host was not called")
            raise ValueError(f"pool {name!r} was not registered (register_mem_host_pool_v2)")
        return fmt

    def _kv_format(self) -> _Format:
        """The KV format; before a host pool is registered, the parts by MLA-ness (rule 1)."""
        return self._formats.get(KV) or _Format(["_k"] if self.is_mla else ["_k", "_v"], None, False, 1)

    # -- keys ------------------------------------------------------------------------------

    def _base(self, key: str, name: str) -> str:
        if name == KV:
            return key + self.suffix + self._tag
        suffix = self.sharded_suffix if name in _RANK_SHARDED else self.suffix
        return f"{key}.{name}{suffix}{self._tag}"

    def _object_keys(self, name: str, fmt: _Format, keys: Sequence[str]) -> List[str]:
        ends = fmt.names()
        return [self._base(k, name) + e for k in keys for e in ends]

    # -- the store -------------------------------------------------------------------------

    def _put(self, keys: List[str], views: List[memoryview]) -> List[bool]:
        ok = [False] * len(keys)
        for lo, hi in _txns([v.nbytes for v in views]):
            try:
                res = self.client.batch_offload(new_txn_id(), list(zip(keys[lo:hi], views[lo:hi])))
            except Exception as e:  # noqa: BLE001 - rule 6
                logger.error("kvoffload: offload of %d objects (%s, ...) failed: %s", hi - lo, keys[lo], e)
                continue
            first = None
            for j, r in enumerate(res):
                ok[lo + j] = r.ok
                if r.outcome == Outcome.CONFLICT:
                    logger.error("kvoffload: key %s holds other bytes (%s: %s): the key scheme is missing something",
                                 r.key, getattr(r.code, "name", r.code), r.reason)
                    self._count(conflicts=1)
                elif not r.ok and first is None:
                    first = r
            if first is not None:
                logger.warning("kvoffload: %s not stored: %s %s %s", first.key, first.outcome.name,
                               getattr(first.code, "name", first.code), first.reason)
        return ok

    def _get(self, keys: List[str], views: List[memoryview]) -> List[bool]:
        ok = [False] * len(keys)
        for lo, hi in _txns([v.nbytes for v in views]):
            try:
                got = self.client.batch_get_into(keys[lo:hi], views[lo:hi])
            except Exception as e:  # noqa: BLE001 - rule 6
                logger.error("kvoffload: read of %d objects (%s, ...) failed: %s", hi - lo, keys[lo], e)
                continue
            for j, g in enumerate(got):
                ok[lo + j] = g.status == GetStatus.FOUND and g.size == views[lo + j].nbytes
        return ok

    def _present(self, keys: List[str]) -> List[bool]:
        if self.hint is not None:
            got = self.hint.presence(keys)
            if got is not None:
                self._count(hint_answers=1)
                return got
        out: List[bool] = []
        for lo in range(0, len(keys), _MAX_TXN_KEYS):
            ex = self.client.batch_exists(keys[lo:lo + _MAX_TXN_KEYS])
            out += [p == Presence.PRESENT for p in ex.keys]
        return out

    @staticmethod
    def _per_page(ok: List[bool], per: int) -> List[bool]:
        return [all(ok[i:i + per]) for i in range(0, len(ok), per)]

    @staticmethod
    def _spans(ok: List[bool], spans: List[int]) -> List[bool]:
        out, at = [], 0
        for n in spans:
            out.append(all(ok[at:at + n]))
            at += n
        return out

    # -- pages of a host pool --------------------------------------------------------------

    def _plan(self, name: str, keys: Sequence[str], host_indices: Any, write: bool):
        """The objects of keys' pages at host_indices (rule 1): (object keys, views, keep,
        finish). keep holds copies alive; finish(page_ok) stores copied-in pages into the pool."""
        fmt = self._format(name)
        n, ps = len(keys), fmt.page_size
        if host_indices is None or _count_of(host_indices) != n * ps:
            got = None if host_indices is None else _count_of(host_indices)
            raise ValueError(f"{got} host indices for {n} {name} pages of {ps} tokens")
        okeys = self._object_keys(name, fmt, keys)
        if fmt.zero_copy:
            ptrs, sizes = fmt.pool.get_page_buffer_meta(host_indices)
            per = len(fmt.sizes)
            if len(ptrs) != n * per or any(int(s) != fmt.sizes[i % per] for i, s in enumerate(sizes)):
                raise ValueError(f"get_page_buffer_meta gave {len(ptrs)} buffers for {n} pages of {per} parts "
                                 f"({fmt.describe()})")
            views = [v for p, s in zip(ptrs, sizes) for v in _split(_engine.ptr_view(int(p), int(s)))]
            return okeys, views, None, None
        pool = fmt.pool
        slots = [int(host_indices[i * ps]) for i in range(n)]
        if write:
            pages = [pool.get_data_page(s, flat=True).contiguous() for s in slots]
            views = [v for t in pages for v in fmt.cut(_engine.view_of(t))]
            return okeys, views, pages, None
        pages = [pool.get_dummy_flat_data_page() for _ in slots]
        views = [v for t in pages for v in fmt.cut(_engine.view_of(t))]

        def finish(page_ok: List[bool]) -> List[bool]:
            out = list(page_ok)
            for i, ok in enumerate(page_ok):
                if ok:
                    try:
                        pool.set_from_flat_data_page(slots[i], pages[i])
                    except Exception as e:  # noqa: BLE001 - rule 6
                        logger.error("kvoffload: set_from_flat_data_page(%d) of %s failed: %s", slots[i], name, e)
                        out[i] = False
            return out

        return okeys, views, pages, finish

    def _io(self, requests: List[Tuple[Any, Sequence[str], Any]], write: bool, what: str) -> List[List[bool]]:
        """Moves the pages of several pools in one go: requests are (pool name, keys, host
        indices); the answer is each request's per-page success."""
        plans, out = [], []
        for pool_name, keys, host_indices in requests:
            name = _name(pool_name)
            out.append([False] * len(keys))
            if not keys:
                plans.append(None)
                continue
            try:
                plans.append((name, len(keys)) + self._plan(name, keys, host_indices, write))
            except Exception as e:  # noqa: BLE001 - rule 6
                logger.error("kvoffload: %s of %d %s pages failed: %s", what, len(keys), name, e)
                plans.append(None)
        okeys = [k for p in plans if p for k in p[2]]
        views = [v for p in plans if p for v in p[3]]
        ok = (self._put if write else self._get)(okeys, views) if okeys else []
        at = 0
        for i, p in enumerate(plans):
            if not p:
                continue
            name, n, pk, _, _, finish = p
            page_ok = self._per_page(ok[at:at + len(pk)], len(pk) // n)
            at += len(pk)
            if finish is not None:
                page_ok = finish(page_ok)
            if not self._formats[name].zero_copy:
                self._count(pages_copied=n)
            out[i] = page_ok
        good = sum(sum(o) for o in out)
        bad = sum(len(o) for o in out) - good
        self._count(**({"pages_set": good, "set_failed": bad} if write else {"pages_get": good, "get_failed": bad}))
        return out

    # -- v1 (zero-copy when the layout allows) ---------------------------------------------

    def batch_set_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        """The KV pages at host_indices (len(keys) x page_size of them) stored under keys;
        per page True when all its objects are stored (rule 4)."""
        return self._io([(KV, keys, host_indices)], True, "batch_set_v1")[0]

    def batch_get_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        """keys' KV pages read into the host pool at host_indices; per page True when all its
        objects were found with their sizes."""
        return self._io([(KV, keys, host_indices)], False, "batch_get_v1")[0]

    # -- v2 (hybrid models) ----------------------------------------------------------------

    def batch_set_v2(self, transfers: List[Any], extra_info: Any = None) -> dict[str, List[bool]]:
        """Each PoolTransfer's pages (transfer.keys at transfer.host_indices of the pool
        registered as transfer.name) stored, all in as few transactions as the limits allow;
        {transfer.name: per-page success}."""
        res = self._io([(t.name, list(t.keys or []), t.host_indices) for t in transfers], True, "batch_set_v2")
        return {t.name: r for t, r in zip(transfers, res)}

    def batch_get_v2(self, transfers: List[Any], extra_info: Any = None) -> dict[str, List[bool]]:
        """Each PoolTransfer's pages read into its pool; {transfer.name: per-page success}."""
        res = self._io([(t.name, list(t.keys or []), t.host_indices) for t in transfers], False, "batch_get_v2")
        return {t.name: r for t, r in zip(transfers, res)}

    def batch_exists_v2(self, keys: List[str], pool_transfers: Optional[List[Any]] = None,
                        extra_info: Any = None) -> PoolTransferResult:
        """The usable prefix of keys (rule 5): kv_hit_pages, the longest prefix of pages whose
        KV objects are present and that every transfer's pool can restore under its hit policy;
        extra_pool_hit_pages, per pool with a hit (KV included), its own longest prefix."""
        from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransferResult

        def result(pages: int, hits: dict, restorable: List[int]):
            fields = {f.name for f in dataclasses.fields(PoolTransferResult)}
            extra = {"restorable": restorable} if "restorable" in fields else {}
            return PoolTransferResult(kv_hit_pages=pages, extra_pool_hit_pages=hits, **extra)

        transfers = list(pool_transfers or [])
        if not keys:
            return result(0, {}, [])
        try:
            groups = [(KV, self._kv_format())]
            for t in transfers:
                name = _name(t.name)
                groups.append((name, self._formats.get(name)))
                if groups[-1][1] is None:
                    logger.error("kvoffload: batch_exists_v2: pool %r was not registered (register_mem_host_pool_v2)",
                                 name)
            okeys = [k for name, fmt in groups if fmt is not None for k in self._object_keys(name, fmt, keys)]
            present = self._present(okeys)
        except Exception as e:  # noqa: BLE001 - rule 6
            logger.warning("kvoffload: batch_exists_v2 failed: %s", e)
            return result(0, {}, [])
        has: List[List[bool]] = []
        at = 0
        for name, fmt in groups:
            if fmt is None:
                has.append([False] * len(keys))
                continue
            per = len(fmt.names())
            has.append(self._per_page(present[at:at + per * len(keys)], per))
            at += per * len(keys)
        kv_pages = has[0].index(False) if False in has[0] else len(keys)
        hits: dict = {PoolName.KV: kv_pages} if kv_pages else {}
        restorable = set(range(1, kv_pages + 1))
        for t, page_has in zip(transfers, has[1:]):
            if not restorable:
                break
            if _name(getattr(t, "hit_policy", "all_pages")) == "trailing_pages":
                trailing = max(1, len(t.keys) if t.keys else 1)
                ok = {p for p in range(1, kv_pages + 1) if all(page_has[max(0, p - trailing):p])}
            else:
                first_missing = page_has.index(False) if False in page_has[:kv_pages] else kv_pages
                ok = set(range(1, min(first_missing, kv_pages) + 1))
            if ok:
                hits[t.name] = max(ok)
            restorable &= ok
        return result(max(restorable) if restorable else 0, hits, sorted(restorable))

    # -- the generic (copying) interface: flat pages, the same objects ---------------------

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """How many leading pages of keys have all their KV objects present (rule 5)."""
        if not keys:
            return 0
        fmt = self._kv_format()
        per = len(fmt.names())
        try:
            present = self._present(self._object_keys(KV, fmt, keys))
        except Exception as e:  # noqa: BLE001 - rule 6
            logger.warning("kvoffload: batch_exists failed: %s", e)
            return 0
        pages = self._per_page(present, per)
        return pages.index(False) if False in pages else len(pages)

    def exists(self, key: str) -> bool:
        """Whether key's page has all its KV objects present (the same objects the v1 calls
        and batch_set write)."""
        return self.batch_exists([key]) == 1

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """Flat pages (SGLang's _generic_page_set: get_data_page(flat=True)) stored as the KV
        objects of keys; True when every page is stored."""
        if not keys:
            return True
        fmt = self._kv_format()
        okeys, views, keep, spans = [], [], [], []
        try:
            if values is None or len(values) != len(keys):
                raise ValueError(f"{0 if values is None else len(values)} values for {len(keys)} keys")
            for k, v in zip(keys, values):
                if hasattr(v, "contiguous"):
                    v = v.contiguous()
                keep.append(v)
                ends, parts = fmt.cut_any(_engine.view_of(v))
                okeys += [self._base(k, KV) + e for e in ends]
                views += parts
                spans.append(len(parts))
        except Exception as e:  # noqa: BLE001 - rule 6
            logger.error("kvoffload: batch_set of %d pages failed: %s", len(keys), e)
            self._count(set_failed=len(keys))
            return False
        pages = self._spans(self._put(okeys, views), spans)
        self._count(generic_set=sum(pages), set_failed=len(pages) - sum(pages))
        return all(pages)

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> List[Any | None] | int:
        """keys' KV pages read into target_locations (SGLang's _generic_page_get passes
        get_dummy_flat_data_page() tensors): per key its target, or None when the page is not
        complete. Without targets, per key the page's bytes or None."""
        if not keys:
            return []
        fmt = self._kv_format()
        ends = fmt.names()
        try:
            okeys = self._object_keys(KV, fmt, keys)
            if target_locations is None:
                got = []
                for lo, hi in _txns([1] * len(okeys)):
                    got += self.client.batch_get(okeys[lo:hi])
                out = []
                for i in range(len(keys)):
                    parts = got[i * len(ends):(i + 1) * len(ends)]
                    out.append(b"".join(bytes(g.value) for g in parts) if all(g.ok for g in parts) else None)
                self._count(generic_get=sum(o is not None for o in out))
                return out
            okeys, views, spans = [], [], []
            for k, t in zip(keys, target_locations):
                ends, parts = fmt.cut_any(_engine.view_of(t))
                okeys += [self._base(k, KV) + e for e in ends]
                views += parts
                spans.append(len(parts))
            if len(target_locations) != len(keys):
                raise ValueError(f"{len(target_locations)} targets for {len(keys)} keys")
        except Exception as e:  # noqa: BLE001 - rule 6
            logger.error("kvoffload: batch_get of %d pages failed: %s", len(keys), e)
            self._count(get_failed=len(keys))
            return [None] * len(keys)
        pages = self._spans(self._get(okeys, views), spans)
        self._count(generic_get=sum(pages), get_failed=len(pages) - sum(pages))
        return [t if ok else None for t, ok in zip(target_locations, pages)]

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any | None:
        return self.batch_get([key], [target_location] if target_location is not None else None)[0]

    def clear(self) -> None:
        # kvoffload has no "remove everything" and no key listing; pages are removed by the
        # store's eviction (docs/operations.md) or by Remove of known keys.
        logger.info("kvoffload: clear() leaves the store's keys in place")

    def get_stats(self):
        """Counters: pages_set / pages_get (v1 and v2 pages), generic_set / generic_get
        (batch_set / batch_get pages), set_failed, get_failed, conflicts, pages_copied (pages
        moved through get_data_page rather than zero-copy)."""
        with self._lock:
            return dict(self._stats)

    def close(self) -> None:
        if self.hint is not None:
            self.hint.close()
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
