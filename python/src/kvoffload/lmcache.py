"""LMCache storage plugin on kvoffload.

Upstream read (LMCache/LMCache; this machine's git mirror, /work/.mirror/LMCache+LMCache, stops
at 54641ca of 2024-10-24, before lmcache/v1, so the files were read from the public file
index, which names a commit only for some of them):

- lmcache/v1/storage_backend/abstract_backend.py, the newest stored text (StorageBackendInterface
  with batched_async_contains, batched_get_non_blocking, get_allocator_backend,
  batched_contains, touch_cache and cancel_request; StoragePluginInterface(dst_device=
  torch_device_type, config, metadata, local_cpu_backend, loop)); the older texts at 00d44c9
  and 2bbf159 (submit_prefetch_task, get_non_blocking abstract); batched_contains_gaps(keys,
  pin=False) -> Optional[(gaps, end)] (default None, "I don't support gap reporting") as
  LMCache's own tests of it and of StorageManager.batched_contains_with_gaps use it.
- lmcache/v1/storage_backend/__init__.py, storage_plugin_launcher (the text with is_gpu_worker
  and the PR 1578 deprecation warning): for every name in config.storage_plugins it imports
  extra_config["storage_plugin.<name>.module_path"], takes "class_name" from it and calls
  cls(config=, dst_device=, metadata=, local_cpu_backend=, loop=); an exception is logged as
  "Failed to create backend <name>: ..." and the engine starts without the plugin. The
  scheduler role passes local_cpu_backend=None.
- lmcache/v1/memory_management.py (the text with EC_TD and HS_TD): MemoryFormat; MemoryObj
  with get_shape / get_dtype (the first group) and get_shapes / get_dtypes (every group),
  byte_array covering get_size() bytes, every group in order; MemoryAllocatorInterface.
  _adapt_shapes_and_dtypes, which wraps a torch.Size (not a tuple) into [shape] and a
  torch.dtype into [dtype] and asserts len(shapes) == len(dtypes): a plain tuple of 4 ints
  counts as 4 shapes ("shapes and dtypes must have the same length, got 4 and 1").
- lmcache/v1/storage_backend/local_cpu_backend.py: allocate(shapes, dtypes, fmt=None,
  eviction=True, busy_loop=True); storage_manager.py: batched_put hands each backend the
  objects of get_allocator_backend() and drops its own reference right after
  batched_submit_put_task returns; async_lookup_and_prefetch awaits
  batched_async_contains(lookup_id, keys, pin), unpins a rounded-off tail, then
  batched_get_non_blocking(lookup_id, keys[:hits], {"cum_chunk_lengths": ...}) and zips
  the returned prefix with the keys.

Configuration (LMCACHE_CONFIG_FILE; python/README.md "LMCache"), under any instance name:

    storage_plugins: ["kvoffload"]
    extra_config:
      storage_plugin.kvoffload.module_path: kvoffload.lmcache
      storage_plugin.kvoffload.class_name: KVOffloadBackend
      storage_plugin.kvoffload.addrs: "127.0.0.1:7101,127.0.0.1:7102"

Rules and invariants:

- Name: the launcher does not tell a plugin its name. An instance reads the options of the
  storage_plugins entry whose module_path / class_name name this class; with several such
  entries, the k-th instance made from one config takes the k-th of them in the launcher's
  own order (it iterates set(config.storage_plugins)). `addrs` is required and an option
  this plugin does not know is refused: a missing or misspelt setting fails the
  construction with a ValueError naming it (LMCache logs it at start-up), never a plugin
  quietly dialling a default address.
- Keys: a CacheEngineKey is stored under "lmcache/" + key.to_string().
- Values: "KVO2", u32 length, JSON {shapes, dtypes, fmt (the MemoryFormat's name), n (payload
  bytes), parts}, then the payload: the object's bytes, every group in order
  (sum(numel * itemsize) over its shapes and dtypes). A value over MAX_OBJECT_BYTES is cut
  into parts stored under key, key#1, key#2, ... in the same transaction. Values of the
  earlier "KVO1" layout (one shape, fmt as a number) are still read. A read trusts no header:
  parts above MAX_PARTS (what the writer can produce), shapes other than non-negative
  integers, an unknown dtype or format, or n other than the shapes' bytes is a miss with
  a warning, checked before any further part is fetched or anything allocated.
- Reads allocate from the local CPU backend with torch.Size shapes and torch dtypes: one
  group as (torch.Size, dtype) (every LMCache version), several as ([torch.Size...],
  [dtype...]); the allocator's object must hold exactly the payload's bytes, or the read is a
  miss. A read never raises into the engine: a failure is logged and the chunk is None.
- Lookups: contains / batched_contains / batched_async_contains are BatchExists (the prefix
  count); pin asks a lease of pin_lease seconds that expires by itself (unpin returns True
  and leaves it to expire). batched_contains_gaps answers every key: (the maximal runs of
  keys not present, len(keys)), None when the store cannot answer (LMCache then falls back
  to the prefix). A key being written (IN_FLIGHT) is not present.
- Puts: batched_submit_put_task holds each object's ref count until its bytes are sent,
  sends one transaction per at most MAX_BATCH_KEYS keys / MAX_BATCH_BYTES bytes on a worker
  thread and returns its Future (True when every key is Stored or AlreadyStored);
  on_complete_callback runs once per stored key; exists_in_put_tasks is True meanwhile.
- Lookup IDs: batched_get_non_blocking returns the found prefix and gives back (ref count
  down) every object after the first miss. cancel_request(req_id) drops the request's
  queued reads, makes its running ones give their objects back and return [], and a read
  that starts later for that ID returns [] at once.

The engine is imported only when KVOffloadBackend is first used (import kvoffload.lmcache
imports neither lmcache nor torch).
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _engine
from .client import Client
from .types import MAX_BATCH_BYTES, MAX_BATCH_KEYS, MAX_OBJECT_BYTES, Presence, new_txn_id

if TYPE_CHECKING:  # the annotations name LMCache's types as abstract_backend.py does
    from lmcache.v1.memory_management import MemoryObj
    from lmcache.v1.storage_backend.abstract_backend import AllocatorBackendInterface

logger = logging.getLogger(__name__)

__all__ = ["KVOffloadBackend", "encode", "decode_header", "BadHeader", "MAX_PARTS", "OPTIONS"]

_MAGIC1 = b"KVO1"
_MAGIC = b"KVO2"
_PREFIX = "lmcache/"

# The plugin's own options (storage_plugin.<name>.<option>); module_path and class_name are
# the launcher's.
OPTIONS = ("module_path", "class_name", "addrs", "timeout", "token", "token_file", "tls_ca",
           "insecure_token", "local", "pin_lease", "workers")


# -- the stored value ------------------------------------------------------------------------


def _dtype_name(dtype: Any) -> str:
    s = str(dtype)
    return s[len("torch."):] if s.startswith("torch.") else s


def encode(shapes: Sequence[Sequence[int]], dtypes: Sequence[Any], fmt: Any, payload: memoryview,
           parts: int = 1) -> bytes:
    """The stored value: magic, u32 header length, JSON header, payload."""
    head = json.dumps({"shapes": [[int(s) for s in shape] for shape in shapes],
                       "dtypes": [_dtype_name(d) for d in dtypes],
                       "fmt": getattr(fmt, "name", str(fmt)), "n": payload.nbytes, "parts": parts},
                      separators=(",", ":")).encode()
    return b"".join((_MAGIC, struct.pack("<I", len(head)), head, payload))


# The most parts the writer produces: a chunk's parts go in one transaction, so its value is at
# most MAX_BATCH_BYTES, cut into MAX_OBJECT_BYTES parts (plus one for the rounding). A header
# asking for more was not written by this plugin.
MAX_PARTS = MAX_BATCH_BYTES // MAX_OBJECT_BYTES + 1


class BadHeader(ValueError):
    """A stored value whose header this plugin did not write (or cannot read): a miss."""


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def decode_header(v: memoryview) -> Tuple[dict, memoryview]:
    """(header, payload) of a stored value (or of its first part); a KVO1 header is returned
    in the KVO2 form (shapes, dtypes, fmt, n, parts).

    Nothing of the header is trusted: BadHeader unless parts is 1..MAX_PARTS, shapes a
    non-empty list of lists of non-negative integers, dtypes as many strings, fmt a name or
    a number, and n a non-negative integer of at most MAX_PARTS * MAX_OBJECT_BYTES. The
    dtypes' names are checked against torch by the reader, before any part is fetched."""
    if v.nbytes < 8:
        raise BadHeader(f"a value of {v.nbytes} bytes")
    magic = bytes(v[:4])
    if magic not in (_MAGIC, _MAGIC1):
        raise BadHeader("not a kvoffload LMCache value (bad magic)")
    (n,) = struct.unpack("<I", bytes(v[4:8]))
    if 8 + n > v.nbytes:
        raise BadHeader(f"a header of {n} bytes in a value of {v.nbytes}")
    try:
        head = json.loads(bytes(v[8:8 + n]))
    except (ValueError, RecursionError) as e:
        raise BadHeader(f"header not JSON: {e}") from None
    payload = v[8 + n:]
    if not isinstance(head, dict):
        raise BadHeader("header not a JSON object")
    if magic == _MAGIC1:
        dt, fmt = head.get("dtype"), head.get("fmt")
        if not isinstance(dt, str) or not _is_count(fmt):
            raise BadHeader("KVO1 header without a dtype name and a format number")
        head = {"shapes": [head.get("shape")], "dtypes": [dt[len("torch."):] if dt.startswith("torch.") else dt],
                "fmt": fmt, "n": payload.nbytes, "parts": 1}
    parts, shapes, dtypes, fmt, total = (head.get("parts", 1), head.get("shapes"), head.get("dtypes"),
                                         head.get("fmt"), head.get("n"))
    if not _is_count(parts) or not 1 <= parts <= MAX_PARTS:
        raise BadHeader(f"parts {parts!r}: 1..{MAX_PARTS}")
    if (not isinstance(shapes, list) or not shapes
            or not all(isinstance(s, list) and all(_is_count(d) for d in s) for s in shapes)):
        raise BadHeader("shapes not lists of non-negative integers")
    if not isinstance(dtypes, list) or len(dtypes) != len(shapes) or not all(isinstance(d, str) for d in dtypes):
        raise BadHeader("dtypes not one name per shape")
    if not (isinstance(fmt, str) or _is_count(fmt)):
        raise BadHeader(f"memory format {fmt!r}")
    if not _is_count(total) or total > MAX_PARTS * MAX_OBJECT_BYTES:
        raise BadHeader(f"payload size {total!r}")
    return head, payload


def _nbytes(shapes: Sequence[Sequence[int]], itemsizes: Sequence[int]) -> int:
    total = 0
    for shape, size in zip(shapes, itemsizes):
        n = 1
        for s in shape:
            n *= int(s)
        total += n * size
    return total


def _itemsize(dtype: Any) -> int:
    """Bytes per element of a torch (or numpy) dtype; torch before 2.1 has no dtype.itemsize."""
    size = getattr(dtype, "itemsize", None)
    if size is None:
        import torch

        size = torch.empty((), dtype=dtype).element_size()
    return int(size)


def _groups(obj: Any) -> Tuple[List[Any], List[Any]]:
    """(shapes, dtypes) of a MemoryObj, every group: get_shapes / get_dtypes where the
    object has them, else its one shape and dtype."""
    try:
        shapes, dtypes = list(obj.get_shapes()), list(obj.get_dtypes())
        if shapes and len(shapes) == len(dtypes):
            return shapes, dtypes
    except (AttributeError, NotImplementedError, AssertionError, TypeError):
        pass
    return [obj.get_shape()], [obj.get_dtype()]


def _payload(obj: Any, shapes: List[Any], dtypes: List[Any]) -> memoryview:
    """The object's bytes, every group, exactly sum(numel * itemsize) of them."""
    want = _nbytes(shapes, [_itemsize(d) for d in dtypes])
    mv = _engine.view_of(obj.byte_array)
    if mv.nbytes < want:  # an older byte_array that covers the first group only
        raw = getattr(obj, "raw_data", None)
        if raw is not None and hasattr(raw, "data_ptr"):
            mv = _engine.ptr_view(raw.data_ptr(), min(want, raw.numel() * raw.element_size()))
    if mv.nbytes < want:
        raise ValueError(f"the object exposes {mv.nbytes} bytes for its {len(shapes)} group(s) of {want}")
    return mv[:want]


# -- the plugin's name and options -----------------------------------------------------------

_made: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # config -> instances made from it
_made_ids: Dict[int, Tuple[Any, int]] = {}  # the same, for a config that takes no weak reference (kept alive)
_made_lock = threading.Lock()


def _instance_name(config: Any, extra: dict, module: str, cls: str) -> str:
    """The storage_plugins entry this instance is made for (module docstring, "Name")."""
    names = set(getattr(config, "storage_plugins", None) or ())
    mine = [n for n in names  # the launcher's order: it iterates this very set
            if extra.get(f"storage_plugin.{n}.module_path") == module
            and extra.get(f"storage_plugin.{n}.class_name") in (cls, "KVOffloadBackend")]
    if not mine:
        known = sorted(names)
        raise ValueError(
            f"kvoffload LMCache plugin: no storage_plugins entry names it (storage_plugins = {known}; each needs "
            f"extra_config storage_plugin.<name>.module_path: {module} and storage_plugin.<name>.class_name: {cls})")
    with _made_lock:
        try:
            k = _made.get(config, 0)
            _made[config] = k + 1
        except TypeError:
            k = _made_ids.get(id(config), (config, 0))[1]
            _made_ids[id(config)] = (config, k + 1)
    return mine[k % len(mine)]


def _options(extra: dict, name: str) -> dict:
    prefix = f"storage_plugin.{name}."
    opts = {k[len(prefix):]: v for k, v in extra.items() if isinstance(k, str) and k.startswith(prefix)}
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise ValueError(f"kvoffload LMCache plugin {name!r}: unknown option(s) "
                         f"{', '.join(prefix + u for u in unknown)}; known: {', '.join(OPTIONS)}")
    if not opts.get("addrs"):
        raise ValueError(f"kvoffload LMCache plugin {name!r}: {prefix}addrs is not set (the kvoffload members, "
                         f"\"host:port,host:port\" or \"unix:///PATH\" of a node's --local-socket)")
    for k in ("pin_lease", "timeout"):
        if k in opts and not float(opts[k]) > 0:
            raise ValueError(f"kvoffload LMCache plugin {name!r}: {prefix}{k} must be positive, not {opts[k]!r}")
    if "workers" in opts and int(opts["workers"]) < 1:
        raise ValueError(f"kvoffload LMCache plugin {name!r}: {prefix}workers must be at least 1")
    return opts


class _Lookup:
    """The reads in flight for one lookup ID."""

    __slots__ = ("futures", "cancelled", "active")

    def __init__(self) -> None:
        self.futures: set = set()
        self.cancelled = False
        self.active = 0


class _KVOffloadBackend:
    def __init__(self, dst_device: str = "cpu", config: Any = None, metadata: Any = None,
                 local_cpu_backend: Any = None, loop: Optional[asyncio.AbstractEventLoop] = None, *,
                 client: Optional[Client] = None, name: Optional[str] = None):
        extra = dict(getattr(config, "extra_config", None) or {})
        if name is None:
            name = _instance_name(config, extra, __name__, "KVOffloadBackend")
        opts = _options(extra, name) if client is None else {k[len(f"storage_plugin.{name}."):]: v
                                                               for k, v in extra.items()
                                                               if str(k).startswith(f"storage_plugin.{name}.")}
        self.name = name
        self._base_init(dst_device=dst_device, config=config, metadata=metadata,
                        local_cpu_backend=local_cpu_backend, loop=loop)
        self.client = client or _engine.client_from(opts)
        self.pin_lease = float(opts.get("pin_lease", 60.0))
        self._pool = ThreadPoolExecutor(max_workers=int(opts.get("workers", 4)),
                                        thread_name_prefix=f"kvoffload-lmcache-{name}")
        self._lock = threading.Lock()
        self._putting: Dict[str, int] = {}
        self._lookups: Dict[str, _Lookup] = {}
        self._cancelled: "OrderedDict[str, None]" = OrderedDict()
        logger.info("kvoffload LMCache plugin %r: members %s", name, opts.get("addrs"))

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

    def _presence(self, keys: List[Any], pin: bool) -> List[Presence]:
        """Presence of every key, MAX_BATCH_KEYS at a time; raises on a store error."""
        out: List[Presence] = []
        sk = [self._k(k) for k in keys]
        for i in range(0, len(sk), MAX_BATCH_KEYS):
            out += self.client.batch_exists(sk[i:i + MAX_BATCH_KEYS], self.pin_lease if pin else 0).keys
        return out

    def contains(self, key: Any, pin: bool = False) -> bool:
        return self.batched_contains([key], pin) == 1

    def batched_contains(self, keys: List[Any], pin: bool = False) -> int:
        n = 0
        try:
            sk = [self._k(k) for k in keys]
            for i in range(0, len(sk), MAX_BATCH_KEYS):
                part = sk[i:i + MAX_BATCH_KEYS]
                got = self.client.batch_exists(part, self.pin_lease if pin else 0).prefix_present
                n += got
                if got < len(part):
                    break
        except Exception as e:
            logger.warning("kvoffload: contains of %d chunks failed: %s", len(keys), e)
        return n

    def batched_contains_gaps(self, keys: List[Any], pin: bool = False) -> Optional[Tuple[List[Tuple[int, int]], int]]:
        try:
            ps = self._presence(list(keys), pin)
        except Exception as e:
            logger.warning("kvoffload: contains of %d chunks failed: %s", len(keys), e)
            return None
        gaps: List[Tuple[int, int]] = []
        start = None
        for i, p in enumerate(ps):
            if p != Presence.PRESENT:
                if start is None:
                    start = i
            elif start is not None:
                gaps.append((start, i))
                start = None
        if start is not None:
            gaps.append((start, len(ps)))
        return gaps, len(ps)

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
                                on_complete_callback: Optional[Callable[[Any], None]] = None) -> Union[List[Future], None]:
        keys, objs = list(keys), list(objs)
        skeys = [self._k(k) for k in keys]
        for o in objs:
            if hasattr(o, "ref_count_up"):
                o.ref_count_up()
        with self._lock:
            for k in skeys:
                self._putting[k] = self._putting.get(k, 0) + 1
        return [self._pool.submit(self._put, keys, skeys, objs, on_complete_callback)]

    def _values(self, key: str, obj: Any) -> List[Tuple[str, bytes]]:
        """(key, value) of every part of one object's stored value."""
        shapes, dtypes = _groups(obj)
        payload = _payload(obj, shapes, dtypes)
        value = encode(shapes, dtypes, obj.get_memory_format(), payload)
        if len(value) <= MAX_OBJECT_BYTES:
            return [(key, value)]
        parts = -(-len(value) // MAX_OBJECT_BYTES)
        value = encode(shapes, dtypes, obj.get_memory_format(), payload, parts)
        parts = -(-len(value) // MAX_OBJECT_BYTES)  # the header grew by a digit at most
        value = encode(shapes, dtypes, obj.get_memory_format(), payload, parts)
        mv = memoryview(value)
        return [(key if i == 0 else f"{key}#{i}", mv[i * MAX_OBJECT_BYTES:(i + 1) * MAX_OBJECT_BYTES])
                for i in range(parts)]

    def _put(self, keys, skeys, objs, cb) -> bool:
        ok_all = True
        try:
            batch: List[Tuple[str, Any]] = []
            owners: List[Tuple[int, int]] = []  # (index of the chunk, its parts) in batch order
            size = 0

            def send() -> None:
                nonlocal ok_all, batch, owners, size
                if not batch:
                    return
                try:
                    res = self.client.batch_offload(new_txn_id(), batch)
                except Exception as e:
                    logger.error("kvoffload: put of %d chunks failed: %s", len(owners), e)
                    ok_all = False
                    res = None
                at = 0
                for i, n in owners:
                    rs = res[at:at + n] if res is not None else []
                    at += n
                    bad = [r for r in rs if not r.ok]
                    for r in bad:
                        logger.error("kvoffload: put of %s: %s %s: %s", r.key, r.outcome.name, r.code, r.reason)
                    if res is None or bad:
                        ok_all = False
                    elif cb is not None:
                        try:
                            cb(keys[i])
                        except Exception as e:  # as LMCache: callback errors are logged
                            logger.error("kvoffload: put callback failed: %s", e)
                batch, owners, size = [], [], 0

            for i, (k, o) in enumerate(zip(skeys, objs)):
                try:
                    vals = self._values(k, o)
                except Exception as e:
                    logger.error("kvoffload: put of %s: %s", k, e)
                    ok_all = False
                    continue
                finally:
                    if hasattr(o, "ref_count_down"):
                        o.ref_count_down()  # the bytes are copied into vals
                n = sum(len(v) for _, v in vals)
                if batch and (len(batch) + len(vals) > MAX_BATCH_KEYS or size + n > MAX_BATCH_BYTES):
                    send()
                batch += vals
                owners.append((i, len(vals)))
                size += n
            send()
            return ok_all
        finally:
            with self._lock:
                for k in skeys:
                    c = self._putting.get(k, 0) - 1
                    if c > 0:
                        self._putting[k] = c
                    else:
                        self._putting.pop(k, None)

    async def async_batched_submit_put_task(self, keys, objs, transfer_spec=None, on_complete_callback=None) -> None:
        futs = self.batched_submit_put_task(keys, objs, transfer_spec, on_complete_callback) or []
        await asyncio.gather(*(asyncio.wrap_future(f) for f in futs))

    # -- gets ----------------------------------------------------------------------------

    def get_blocking(self, key: Any) -> Optional[MemoryObj]:
        return self.batched_get_blocking([key])[0]

    def batched_get_blocking(self, keys: List[Any]) -> List[Optional[MemoryObj]]:
        keys = list(keys)
        out: List[Optional[Any]] = [None] * len(keys)
        try:
            sk = [self._k(k) for k in keys]
            got = []
            for i in range(0, len(sk), MAX_BATCH_KEYS):
                got += self.client.batch_get(sk[i:i + MAX_BATCH_KEYS])
        except Exception as e:
            logger.error("kvoffload: get of %d chunks failed: %s", len(keys), e)
            return out
        for i, g in enumerate(got):
            if not g.ok:
                continue
            try:
                out[i] = self._memory_obj(sk[i], g.value)
            except BadHeader as e:
                logger.warning("kvoffload: get of %s: %s; a miss", sk[i], e)
            except Exception as e:
                logger.error("kvoffload: get of %s: %s", sk[i], e)
        return out

    def _memory_obj(self, key: str, value: Any) -> Optional[Any]:
        """The MemoryObj of one stored value. The header is checked whole (decode_header, the
        dtypes against torch, the format against LMCache, n against the shapes) before any
        further part is fetched or anything allocated: a bad header is BadHeader."""
        head, payload = decode_header(memoryview(value))
        import torch
        from lmcache.v1.memory_management import MemoryFormat

        dtypes = [getattr(torch, d, None) for d in head["dtypes"]]
        for name, d in zip(head["dtypes"], dtypes):
            if not isinstance(d, torch.dtype):
                raise BadHeader(f"dtype {name!r} is not in this torch {torch.__version__}")
        fmt = head["fmt"]
        try:
            fmt = MemoryFormat(fmt) if isinstance(fmt, int) else MemoryFormat[fmt]
        except (KeyError, ValueError):
            raise BadHeader(f"memory format {fmt!r} is not in this LMCache") from None
        want = _nbytes(head["shapes"], [_itemsize(d) for d in dtypes])
        if want != head["n"]:
            raise BadHeader(f"shapes {head['shapes']} {head['dtypes']} of {want} bytes, header says {head['n']}")
        parts = head["parts"]
        if parts > 1:
            rest = self.client.batch_get([f"{key}#{i}" for i in range(1, parts)])
            missing = [r.key for r in rest if not r.ok]
            if missing:
                logger.warning("kvoffload: get of %s: part %s missing (evicted); a miss", key, missing[0])
                return None
            payload = memoryview(b"".join([payload] + [memoryview(r.value) for r in rest]))
        if payload.nbytes != want:
            raise ValueError(f"stored payload of {payload.nbytes} bytes for shapes {head['shapes']} "
                             f"{head['dtypes']} of {want}")
        shapes = [torch.Size(s) for s in head["shapes"]]
        alloc = self.local_cpu_backend
        if alloc is None:
            raise ValueError("no local CPU backend to allocate from (LMCache's scheduler role reads nothing)")
        if len(shapes) == 1:
            obj = alloc.allocate(shapes[0], dtypes[0], fmt)
        else:
            obj = alloc.allocate(shapes, dtypes, fmt)
        if obj is None:
            logger.warning("kvoffload: get of %s: the local CPU backend allocated nothing (full); a miss", key)
            return None
        try:
            dst = _engine.view_of(obj.byte_array)
            if dst.nbytes < want:
                raise ValueError(f"the allocated object holds {dst.nbytes} bytes of the {want} stored")
            dst[:want] = payload
        except BaseException:
            obj.ref_count_down()
            raise
        return obj

    def get_non_blocking(self, key: Any, location: Optional[str] = None) -> Optional[Future]:
        return self._pool.submit(self.get_blocking, key)

    def _lookup(self, lookup_id: str) -> Optional[_Lookup]:
        with self._lock:
            if lookup_id in self._cancelled:
                return None
            lk = self._lookups.get(lookup_id)
            if lk is None:
                lk = self._lookups[lookup_id] = _Lookup()
            lk.active += 1
            return lk

    def _done_lookup(self, lookup_id: str, lk: _Lookup) -> None:
        with self._lock:
            lk.active -= 1
            if lk.active == 0 and self._lookups.get(lookup_id) is lk:
                del self._lookups[lookup_id]

    @staticmethod
    def _give_back(objs) -> None:
        for o in objs or ():
            if o is not None and hasattr(o, "ref_count_down"):
                o.ref_count_down()

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[Any], transfer_spec: Any = None) -> list[MemoryObj]:
        lk = self._lookup(lookup_id)
        if lk is None:
            return []
        fut = self._pool.submit(self.batched_get_blocking, list(keys))
        with self._lock:
            lk.futures.add(fut)
        try:
            objs = await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            if fut.cancelled():  # cancel_request dropped it before it ran
                return []
            # The caller went away: whatever the read allocates is given back.
            fut.add_done_callback(lambda f: self._give_back(None if f.cancelled() else f.result()))
            raise
        finally:
            with self._lock:
                lk.futures.discard(fut)
            self._done_lookup(lookup_id, lk)
        if lk.cancelled:
            self._give_back(objs)
            return []
        out = []
        for i, o in enumerate(objs):  # the prefix that was found, as LMCache's backends return
            if o is None:
                self._give_back(objs[i + 1:])
                break
            out.append(o)
        return out

    def cancel_request(self, req_id: str) -> None:
        with self._lock:
            self._cancelled[req_id] = None
            while len(self._cancelled) > 4096:
                self._cancelled.popitem(last=False)
            lk = self._lookups.get(req_id)
            futs = list(lk.futures) if lk else []
            if lk:
                lk.cancelled = True
        for f in futs:
            f.cancel()

    def submit_prefetch_task(self, key: Any) -> bool:
        return self.contains(key)

    # -- removal and lifecycle -----------------------------------------------------------

    def remove(self, key: Any, force: bool = True) -> bool:
        return self.batched_remove([key], force) == 1

    def batched_remove(self, keys: List[Any], force: bool = True) -> int:
        n = 0
        try:
            sk = [self._k(k) for k in keys]
            for i in range(0, len(sk), MAX_BATCH_KEYS):
                n += sum(r.removed for r in self.client.remove(sk[i:i + MAX_BATCH_KEYS]))
        except Exception as e:
            logger.error("kvoffload: remove of %d chunks failed: %s", len(keys), e)
        return n

    def get_allocator_backend(self) -> AllocatorBackendInterface:
        return self.local_cpu_backend

    def touch_cache(self) -> None:
        return None  # kvoffload's eviction needs no recency hint from here

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.client.close()


_classes: Dict[Any, type] = {}


def _plugin_class() -> type:
    from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface

    cls = _classes.get(StoragePluginInterface)
    if cls is None:
        cls = _classes[StoragePluginInterface] = type(
            "KVOffloadBackend", (_KVOffloadBackend, StoragePluginInterface), {"__module__": __name__, "__doc__": __doc__})
    return cls


def __getattr__(name: str):
    if name == "KVOffloadBackend":
        return _plugin_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
