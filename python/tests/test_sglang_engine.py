"""kvoffload.sglang driven the way SGLang drives a HiCache storage backend, against a real
storenode serve (conftest's node1), with torch tensors shaped as SGLang's host pools shape
them.

What this checks, and against which upstream (sgl-project/sglang):

- UPSTREAM below is a recorded table of the storage interface at
  001067fffe33427bee0ed2f007fb7551a1d76b44 (python/sglang/srt/mem_cache/hicache_storage.py:
  every HiCacheStorage method with its parameters, defaults and return annotation, the
  abstract set, the dataclasses and enums the methods take). The stub in
  tests/stubs/sglang must equal it, and the backend must implement every method with the
  same parameters and return annotation (torch.Tensor written Any). SGLang is not
  installable here (no PyPI, no GPU), so these tests run against the recorded table and the
  stub; test_against_real_sglang runs the same table check on a real SGLang when one is
  importable, and says so when it is not.
- Controller / HybridController below replay, on one rank, the storage side of SGLang's
  cache controllers: managers/cache_controller.py at 001067ff (attach_storage_backend: the
  factory, register_mem_pool_host, the zero-copy choice on "interface_v1"; _page_backup;
  _storage_hit_query in STORAGE_BATCH_SIZE batches; _page_transfer with _page_get_zero_copy /
  _generic_page_get and the KV-derived sidecar batch_get_v2) and
  mem_cache/hybrid_cache/hybrid_cache_controller.py at 00343773 (register_mem_host_pool_v2 of
  every pool, batch_set_v2 before the KV backup, batch_exists_v2 over the whole request,
  _sync_trailing_keys and batch_get_v2 for the other sidecar pools). The all-reduces over TP /
  PP ranks are the identity on one rank; the tests with several ranks run one controller per
  rank.
- MHAHost / MLAHost / MambaHost are the storage-facing side of SGLang's host pools
  (mem_cache/pool_host/mha.py at 0047d999: buffer shapes per layout, get_page_buffer_meta,
  get_data_page, get_dummy_flat_data_page, set_from_flat_data_page; pool_host/mamba.py at
  02f0c2a0), in torch, written from those sources.

Every randomized test takes the seed fixture (KVOFFLOAD_SEED reruns it) and prints it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import random
import re
import subprocess
import sys

import pytest
import torch

import conftest
from signatures import params as shape

UPSTREAM_COMMIT = "001067fffe33427bee0ed2f007fb7551a1d76b44"
REQ = "<required>"

UPSTREAM = {
    # HiCacheStorage at UPSTREAM_COMMIT: method -> (parameters with defaults, return annotation
    # as written upstream; None when there is none).
    "methods": {
        "register_mem_pool_host": ("(mem_pool_host)", None),
        "register_mem_host_pool_v2": ("(host_pool, host_pool_name)", None),
        "batch_exists_v2": ("(keys, pool_transfers=None, extra_info=None)", "PoolTransferResult"),
        "batch_get_v2": ("(transfers, extra_info=None)", "dict[str, List[bool]]"),
        "batch_set_v2": ("(transfers, extra_info=None)", "dict[str, List[bool]]"),
        "batch_get_v1": ("(keys, host_indices, extra_info=None)", "List[bool]"),
        "batch_set_v1": ("(keys, host_indices, extra_info=None)", "List[bool]"),
        "get": ("(key, target_location=None, target_sizes=None)", "torch.Tensor | None"),
        "batch_get": ("(keys, target_locations=None, target_sizes=None)", "List[torch.Tensor | None] | int"),
        "set": ("(key, value=None, target_location=None, target_sizes=None)", "bool"),
        "batch_set": ("(keys, values=None, target_locations=None, target_sizes=None)", "bool"),
        "exists": ("(key)", "bool"),
        "batch_exists": ("(keys, extra_info=None)", "int"),
        "clear": ("()", "None"),
        "get_stats": ("()", None),
    },
    "abstract": {"get", "batch_get", "set", "batch_set", "exists"},
    # Methods whose base implementation raises NotImplementedError (a backend must override
    # them to serve that path).
    "raising": {"batch_exists_v2", "batch_get_v2", "batch_set_v2", "batch_get_v1", "batch_set_v1"},
    "dataclasses": {
        "HiCacheStorageConfig": [("tp_rank", REQ), ("tp_size", REQ), ("pp_rank", REQ), ("pp_size", REQ),
                                 ("attn_cp_rank", REQ), ("attn_cp_size", REQ), ("is_mla_model", REQ),
                                 ("enable_storage_metrics", REQ), ("is_page_first_layout", REQ), ("model_name", REQ),
                                 ("dp_rank", 0), ("dp_size", 1), ("tp_lcm_size", None), ("should_split_heads", False),
                                 ("extra_config", None)],
        "HiCacheStorageExtraInfo": [("prefix_keys", None), ("extra_info", None)],
        "PoolTransfer": [("name", REQ), ("host_indices", None), ("device_indices", None), ("keys", None),
                         ("hit_policy", "all_pages"), ("nodes_to_load", None), ("indices_from_pool", None)],
        "PoolTransferResult": [("kv_hit_pages", REQ), ("extra_pool_hit_pages", REQ)],
        "SidecarPoolSpec": [("pool_name", REQ), ("indices_from_pool", REQ), ("hit_policy", "all_pages")],
    },
    "PoolName": {"KV": "kv", "MAMBA": "mamba", "SWA": "swa", "INDEXER": "indexer",
                 "DEEPSEEK_V4_C4": "deepseek_v4_c4", "DEEPSEEK_V4_C4_INDEXER": "deepseek_v4_c4_indexer",
                 "DEEPSEEK_V4_C128": "deepseek_v4_c128", "DEEPSEEK_V4_C4_STATE": "deepseek_v4_c4_state",
                 "DEEPSEEK_V4_C4_INDEXER_STATE": "deepseek_v4_c4_indexer_state",
                 "DEEPSEEK_V4_C128_STATE": "deepseek_v4_c128_state", "DRAFT": "draft",
                 "DRAFT_INDEXER": "draft_indexer", "DRAFT_SWA": "draft_swa"},
    "PoolHitPolicy": {"ALL_PAGES": "all_pages", "TRAILING_PAGES": "trailing_pages"},
    "STORAGE_BATCH_SIZE": 128,
    # storage/backend_factory.py _create_dynamic_backend: backend_class(storage_config, kwargs).
    "factory_call": ("storage_config", "kwargs"),
}


def returns(f):
    """The return annotation as written (a string under postponed evaluation), torch.Tensor
    read as Any; None when there is none."""
    r = inspect.signature(f).return_annotation
    if r is inspect.Signature.empty:
        return None
    return (r if isinstance(r, str) else getattr(r, "__name__", repr(r))).replace("torch.Tensor", "Any")


def check_module_against_table(hs) -> None:
    """hs: a hicache_storage module (the stub, or a real SGLang's). Asserts it is UPSTREAM."""
    base = hs.HiCacheStorage
    assert set(base.__abstractmethods__) == UPSTREAM["abstract"]
    for m, (params, ret) in UPSTREAM["methods"].items():
        f = getattr(base, m)
        assert shape(f) == params, (m, shape(f))
        want = None if ret is None else ret.replace("torch.Tensor", "Any")
        assert returns(f) == want, (m, returns(f), want)
    for cls, fields in UPSTREAM["dataclasses"].items():
        got = []
        for fd in dataclasses.fields(getattr(hs, cls)):
            d = REQ if fd.default is dataclasses.MISSING and fd.default_factory is dataclasses.MISSING else fd.default
            got.append((fd.name, getattr(d, "value", d)))
        assert got == fields, (cls, got)
    for enum in ("PoolName", "PoolHitPolicy"):
        e = getattr(hs, enum)
        assert {m.name: m.value for m in e} == UPSTREAM[enum], enum
        assert all(isinstance(m, str) and m == m.value for m in e), enum  # str enums: "kv" == PoolName.KV
    assert hs.STORAGE_BATCH_SIZE == UPSTREAM["STORAGE_BATCH_SIZE"]
    assert hs.count_pool_hits({"a": [True, True, False, True], "b": []}) == {"a": 2, "b": 0}


def test_stub_matches_upstream_table():
    """tests/stubs/sglang's hicache_storage is the recorded upstream interface."""
    from sglang.srt.mem_cache import hicache_storage as hs

    check_module_against_table(hs)
    print(f"stub checked against the table of sgl-project/sglang@{UPSTREAM_COMMIT}")


def test_backend_matches_upstream_table():
    """Every HiCacheStorage method is implemented by the backend with upstream's parameters
    (keyword-only extras allowed), defaults and return annotation; the base's raising v1 / v2
    methods are all overridden; the factory's cls(storage_config, kwargs) binds."""
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

    import kvoffload.sglang as ks

    cls, impl = ks.HiCacheKVOffload, ks._HiCacheKVOffload
    assert issubclass(cls, HiCacheStorage) and not getattr(cls, "__abstractmethods__", None)
    for m, (params, ret) in UPSTREAM["methods"].items():
        assert m in vars(impl), f"{impl.__name__} does not implement {m}"
        got = shape(getattr(impl, m))
        assert got == params or got.startswith(params[:-1] + ", *"), (m, got, params)
        want = None if ret is None else ret.replace("torch.Tensor", "Any")
        assert returns(getattr(impl, m)) == want, (m, returns(getattr(impl, m)), want)
        assert not inspect.iscoroutinefunction(getattr(impl, m)), m
    assert UPSTREAM["raising"] <= set(vars(impl))
    inspect.signature(impl.__init__).bind(None, *([None] * len(UPSTREAM["factory_call"])))
    assert ks.UPSTREAM_COMMIT == UPSTREAM_COMMIT
    print(f"backend checked against the table of sgl-project/sglang@{UPSTREAM_COMMIT}")


def test_against_real_sglang():
    """The table check on a real SGLang (imported without the stubs on the path), when one is
    installed; here it is not, and the test says so."""
    code = ("import sys; sys.path[:0] = sys.argv[1:]; "
            "import sglang.srt.mem_cache.hicache_storage as hs; print(hs.__file__)")
    r = subprocess.run([sys.executable, "-c", code, str(conftest.HERE)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"SGLang is not importable here: the backend ran against the recorded table of "
                    f"sgl-project/sglang@{UPSTREAM_COMMIT} and its stub (tests/stubs/sglang)")
    check = (f"import sys; sys.path[:0] = sys.argv[1:]; import sglang.srt.mem_cache.hicache_storage as hs; "
             f"import test_sglang_engine as t; t.check_module_against_table(hs)")
    subprocess.run([sys.executable, "-c", check, str(conftest.HERE)], check=True)


# --- SGLang's host pools (the storage-facing side) -----------------------------------------


def _itemsize(dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def randomize(t: torch.Tensor, gen: torch.Generator) -> None:
    """t's bytes set at random (any dtype: through a byte view)."""
    b = t.view(-1).view(torch.uint8) if t.is_contiguous() else None
    assert b is not None, "randomize a contiguous buffer"
    b.copy_(torch.randint(0, 256, b.shape, dtype=torch.uint8, generator=gen))


class MHAHost:
    """MHATokenToKVPoolHost (pool_host/mha.py at 0047d999): kv_buffer is
    (2, size, layers, heads, head_dim) page_first, (2, layers, size, heads, head_dim)
    layer_first, (2, pages, layers, page_size, heads, head_dim) page_first_direct,
    (2, pages, heads, page_size, layers, head_dim) page_head; a flat page is the K then the V
    half; get_page_buffer_meta gives per page a K and a V pointer (page_first*, page_head) or
    a K and a V pointer per layer (layer_first)."""

    def __init__(self, pages: int, layout: str = "page_first", page_size: int = 4, layers: int = 3, heads: int = 2,
                 head_dim: int = 8, dtype=torch.bfloat16):
        self.page_size, self.layout, self.dtype = page_size, layout, dtype
        self.layer_num, self.head_num, self.head_dim = layers, heads, head_dim
        self.page_num, self.size = pages, pages * page_size
        self.itemsize = _itemsize(dtype)
        self.device, self.pin_memory = "cpu", False
        dims = {"layer_first": (2, layers, self.size, heads, head_dim),
                "page_first": (2, self.size, layers, heads, head_dim),
                "page_first_direct": (2, pages, layers, page_size, heads, head_dim),
                "page_head": (2, pages, heads, page_size, layers, head_dim)}[layout]
        self.kv_buffer = torch.zeros(dims, dtype=dtype)

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        L, H, D, it = self.layer_num, self.head_num, self.head_dim, self.itemsize
        base, idx = self.kv_buffer.data_ptr(), indices.tolist()
        v_offset = L * self.size * H * D * it
        ptrs = []
        if self.layout == "layer_first":
            for i in range(0, len(idx), self.page_size):
                for layer in range(L):
                    k = base + idx[i] * H * D * it + layer * self.size * H * D * it
                    ptrs += [k, k + v_offset]
            return ptrs, [it * self.page_size * H * D] * len(ptrs)
        for i in range(0, len(idx), self.page_size):
            k = base + idx[i] * L * H * D * it
            ptrs += [k, k + v_offset]
        return ptrs, [L * it * self.page_size * H * D] * len(ptrs)

    def get_data_page(self, index, flat: bool = True):
        i, ps = int(index), self.page_size
        if self.layout == "layer_first":
            page = self.kv_buffer[:, :, i:i + ps]
        elif self.layout == "page_first":
            page = self.kv_buffer[:, i:i + ps]
        else:
            page = self.kv_buffer[:, i // ps:i // ps + 1]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        return torch.zeros((2, self.layer_num, self.page_size, self.head_num, self.head_dim), dtype=self.dtype).flatten()

    def set_from_flat_data_page(self, index, data_page) -> None:
        i, ps, L, H, D = int(index), self.page_size, self.layer_num, self.head_num, self.head_dim
        if self.layout == "layer_first":
            self.kv_buffer[:, :, i:i + ps] = data_page.reshape(2, L, ps, H, D)
        elif self.layout == "page_first":
            self.kv_buffer[:, i:i + ps] = data_page.reshape(2, ps, L, H, D)
        elif self.layout == "page_first_direct":
            self.kv_buffer[:, i // ps:i // ps + 1] = data_page.reshape(2, 1, L, ps, H, D)
        else:
            self.kv_buffer[:, i // ps:i // ps + 1] = data_page.reshape(2, 1, H, ps, L, D)

    def page(self, slot: int) -> bytes:
        """The bytes of page slot (its flat page)."""
        return bytes(self.get_data_page(slot * self.page_size).contiguous().view(torch.uint8).numpy())


class MLAHost(MHAHost):
    """MLATokenToKVPoolHost (pool_host/mha.py at 0047d999): one latent buffer, kv_buffer
    (size, layers, 1, kv_dim) page_first, (layers, size, 1, kv_dim) layer_first,
    (pages, layers, page_size, 1, kv_dim) page_first_direct; get_page_buffer_meta gives one
    pointer per page and raises for layer_first."""

    def __init__(self, pages: int, layout: str = "page_first", page_size: int = 4, layers: int = 3, kv_dim: int = 24,
                 dtype=torch.bfloat16):
        self.page_size, self.layout, self.dtype = page_size, layout, dtype
        self.layer_num, self.head_num, self.head_dim = layers, 1, kv_dim
        self.page_num, self.size = pages, pages * page_size
        self.itemsize = _itemsize(dtype)
        self.device, self.pin_memory = "cpu", False
        dims = {"layer_first": (layers, self.size, 1, kv_dim), "page_first": (self.size, layers, 1, kv_dim),
                "page_first_direct": (pages, layers, page_size, 1, kv_dim)}[layout]
        self.kv_buffer = torch.zeros(dims, dtype=dtype)

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        if self.layout not in ("page_first", "page_first_direct"):
            raise ValueError(f"Unsupported layout: {self.layout}")
        idx, base = indices.tolist(), self.kv_buffer.data_ptr()
        row = self.layer_num * self.head_dim * self.itemsize
        ptrs = [base + idx[i] * row for i in range(0, len(idx), self.page_size)]
        return ptrs, [row * self.page_size] * len(ptrs)

    def get_data_page(self, index, flat: bool = True):
        i, ps = int(index), self.page_size
        if self.layout == "layer_first":
            page = self.kv_buffer[:, i:i + ps]
        elif self.layout == "page_first":
            page = self.kv_buffer[i:i + ps]
        else:
            page = self.kv_buffer[i // ps:i // ps + 1]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        return torch.zeros((self.layer_num, self.page_size, 1, self.head_dim), dtype=self.dtype).flatten()

    def set_from_flat_data_page(self, index, data_page) -> None:
        i, ps, L, D = int(index), self.page_size, self.layer_num, self.head_dim
        if self.layout == "layer_first":
            self.kv_buffer[:, i:i + ps] = data_page.reshape(L, ps, 1, D)
        elif self.layout == "page_first":
            self.kv_buffer[i:i + ps] = data_page.reshape(ps, L, 1, D)
        else:
            self.kv_buffer[i // ps:i // ps + 1] = data_page.reshape(1, L, ps, 1, D)


class MambaHost:
    """MambaPoolHost (pool_host/mamba.py at 02f0c2a0), page_first: one slot per request
    state (page_size 1), temporal (slots, layers, 1, *shape) and conv states
    (slots, layers, 1, *shape); a flat page is the temporal then the conv states' bytes;
    get_page_buffer_meta gives them in that order."""

    def __init__(self, slots: int, layers: int = 2, temporal=(2, 4, 4), convs=((3, 8), (3, 4)),
                 tdtype=torch.float32, cdtype=torch.bfloat16):
        self.page_size, self.layout, self.size, self.num_mamba_layers = 1, "page_first", slots, layers
        self.device, self.pin_memory, self.dtype = "cpu", False, cdtype
        self.temporal_buffer = torch.zeros((slots, layers, 1) + tuple(temporal), dtype=tdtype)
        self.conv_buffer = [torch.zeros((slots, layers, 1) + tuple(c), dtype=cdtype) for c in convs]

    def _tensors(self, index):
        return [self.temporal_buffer[index]] + [c[index] for c in self.conv_buffer]

    def get_page_buffer_meta(self, indices):
        ptrs, sizes = [], []
        for i in indices.tolist():
            for t in self._tensors(i):
                ptrs.append(t.data_ptr())
                sizes.append(t.numel() * t.element_size())
        return ptrs, sizes

    def get_data_page(self, index, flat: bool = True):
        return torch.cat([t.contiguous().view(-1).view(torch.uint8) for t in self._tensors(int(index))])

    def get_dummy_flat_data_page(self):
        return torch.zeros(sum(t.numel() * t.element_size() for t in self._tensors(0)), dtype=torch.uint8)

    def set_from_flat_data_page(self, index, data_page) -> None:
        at = 0
        for t in self._tensors(int(index)):
            n = t.numel() * t.element_size()
            t.copy_(data_page[at:at + n].view(t.dtype).reshape(t.shape))
            at += n

    def randomize(self, gen):
        for t in [self.temporal_buffer] + self.conv_buffer:
            randomize(t, gen)

    def page(self, slot: int) -> bytes:
        return bytes(self.get_data_page(slot).numpy())


def pool_random(pool, gen) -> None:
    if isinstance(pool, MambaHost):
        pool.randomize(gen)
    else:
        randomize(pool.kv_buffer, gen)


def hidx(slots, page_size: int) -> torch.Tensor:
    """Host indices of page slots (page_size tokens each), as the controller slices them."""
    return torch.tensor([s * page_size + t for s in slots for t in range(page_size)], dtype=torch.int64)


def chain(prefix: str, n: int):
    """Page keys as SGLang makes them: hex SHA-256, each chained on the previous."""
    out, prev = [], prefix
    for i in range(n):
        prev = hashlib.sha256(f"{prev}|{i}".encode()).hexdigest()
        out.append(prev)
    return out


# --- SGLang's cache controllers, storage side, one rank -------------------------------------


def readme_extra_config() -> dict:
    """The --hicache-storage-backend-extra-config of python/README.md's SGLang command."""
    text = (conftest.REPO / "python" / "README.md").read_text()
    m = re.search(r"--hicache-storage-backend-extra-config '(\{[^']*\})'", text)
    assert m, "python/README.md shows no --hicache-storage-backend-extra-config '{...}'"
    return json.loads(m.group(1))


class Spy:
    """Records each call SGLang makes on the backend: (method, pages)."""

    def __init__(self, backend):
        self.calls = []
        for m in ("batch_set_v1", "batch_get_v1", "batch_set", "batch_get", "batch_exists", "batch_exists_v2",
                  "batch_set_v2", "batch_get_v2"):
            setattr(backend, m, self._wrap(m, getattr(backend, m)))

    def _wrap(self, name, f):
        def call(first, *a, **kw):
            n = len(first) if name not in ("batch_set_v2", "batch_get_v2") else sum(len(t.keys or []) for t in first)
            self.calls.append((name, n))
            return f(first, *a, **kw)

        return call


class Controller:
    """HiCacheController's storage paths (managers/cache_controller.py at 001067ff) on one
    rank: attach_storage_backend, _page_backup, _storage_hit_query, _page_transfer."""

    def __init__(self, node, pool, model: str, extra: dict | None = None, *, tp=(0, 1), pp=(0, 1), cp=(0, 1),
                 is_mla: bool = False, addrs: str = ""):
        from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
        from sglang.srt.mem_cache.storage import StorageBackendFactory

        extra = dict(readme_extra_config() if extra is None else extra)
        extra["addrs"] = addrs or ",".join(node.addrs)
        tp_lcm_size = extra.pop("tp_lcm_size", None)  # _generate_storage_config pops it
        self.page_size, self.pool = pool.page_size, pool
        self.storage_config = HiCacheStorageConfig(
            tp_rank=tp[0], tp_size=tp[1], pp_rank=pp[0], pp_size=pp[1], attn_cp_rank=cp[0], attn_cp_size=cp[1],
            is_mla_model=is_mla, enable_storage_metrics=False, is_page_first_layout=pool.layout == "page_first",
            model_name=model, tp_lcm_size=tp_lcm_size, extra_config=extra)
        self.backup_skip = is_mla and tp[0] != 0  # only TP rank 0 writes replicated MLA KV
        self.backend = StorageBackendFactory.create_backend("dynamic", self.storage_config, pool)
        self.backend.register_mem_pool_host(pool)
        self.spy = Spy(self.backend)
        if bool(self.storage_config.extra_config.get("interface_v1", 0)):
            self.page_get, self.page_set = self._page_get_zero_copy, self._page_set_zero_copy
        else:
            self.page_get, self.page_set = self._generic_page_get, self._generic_page_set

    def close(self):
        self.backend.close()

    # backup (write_storage -> backup_thread_func -> _page_backup)
    def _generic_page_set(self, hashes, host_indices, extra_info=None) -> bool:
        data = [self.pool.get_data_page(host_indices[i * self.page_size]) for i in range(len(hashes))]
        return self.backend.batch_set(hashes, data)

    def _page_set_zero_copy(self, hashes, host_indices, extra_info=None) -> bool:
        return all(self.backend.batch_set_v1(hashes, host_indices, extra_info))

    def backup(self, hash_value, host_indices, pool_transfers=None) -> int:
        """The tokens _page_backup completes (it stops at the first failed batch)."""
        from sglang.srt.mem_cache.hicache_storage import STORAGE_BATCH_SIZE, HiCacheStorageExtraInfo

        if self.backup_skip:
            return 0
        completed = 0
        for i in range(0, len(hash_value), STORAGE_BATCH_SIZE):
            batch = hash_value[i:i + STORAGE_BATCH_SIZE]
            idx = host_indices[i * self.page_size:(i + len(batch)) * self.page_size]
            if not self.page_set(batch, idx, HiCacheStorageExtraInfo(prefix_keys=None)):
                break
            completed += self.page_size * len(batch)
        return completed

    # hit query (prefetch_thread_func -> _storage_hit_query)
    def hit_query(self, page_hashes, pool_transfers=None):
        """(hash_value, hit tokens) as _storage_hit_query answers."""
        from sglang.srt.mem_cache.hicache_storage import STORAGE_BATCH_SIZE, HiCacheStorageExtraInfo

        hash_value, count = [], 0
        for start in range(0, len(page_hashes), STORAGE_BATCH_SIZE):
            batch = page_hashes[start:start + STORAGE_BATCH_SIZE]
            hit = self.backend.batch_exists(batch, HiCacheStorageExtraInfo(prefix_keys=None, extra_info=None))
            hash_value.extend(batch[:hit])
            count += hit * self.page_size
            if hit < len(batch):
                break
        return hash_value, count

    # prefetch (prefetch_io_aux_func -> _page_transfer)
    def _page_get_zero_copy(self, hashes, host_indices, extra_info=None) -> int:
        results = self.backend.batch_get_v1(hashes, host_indices, extra_info)
        n = 0
        for r in results:
            if not r:
                break
            n += 1
        return n

    def _generic_page_get(self, hashes, host_indices, extra_info=None) -> int:
        dummies = [self.pool.get_dummy_flat_data_page() for _ in hashes]
        data = self.backend.batch_get(hashes, dummies)
        if data is None:
            return 0
        n = 0
        for i in range(len(hashes)):
            if data[i] is None:
                break
            self.pool.set_from_flat_data_page(host_indices[i * self.page_size], data[i])
            n += 1
        return n

    def kv_derived(self, pool_transfers):
        return [t for t in pool_transfers or [] if t.indices_from_pool == "kv"]

    def prefetch(self, hash_value, host_indices, pool_transfers=None) -> int:
        """The pages _page_transfer completes, KV-derived sidecar pools included (clamped to
        the smallest hit, batch by batch; it stops at the first short batch)."""
        from sglang.srt.mem_cache.hicache_storage import (STORAGE_BATCH_SIZE, HiCacheStorageExtraInfo,
                                                          PoolTransfer, count_pool_hits)

        completed, ok = 0, True
        derived = self.kv_derived(pool_transfers)
        for i in range(0, len(hash_value), STORAGE_BATCH_SIZE):
            if not ok:
                continue
            batch = hash_value[i:i + STORAGE_BATCH_SIZE]
            idx = host_indices[i * self.page_size:(i + len(batch)) * self.page_size]
            hits = [self.page_get(batch, idx, HiCacheStorageExtraInfo(prefix_keys=None, extra_info=None))]
            if derived:
                res = self.backend.batch_get_v2([PoolTransfer(name=t.name, host_indices=idx, keys=batch)
                                                 for t in derived])
                hits += list(count_pool_hits(res).values())
            hit = min(hits)
            if hit != len(batch):
                ok = False
            completed += hit
        return completed


class HybridController(Controller):
    """HybridCacheController's storage paths (mem_cache/hybrid_cache/hybrid_cache_controller.py
    at 00343773): every host pool registered with register_mem_host_pool_v2; the sidecar
    pools written with batch_set_v2 before the KV backup; the hit query one batch_exists_v2
    when there are sidecar transfers; the non-KV-derived sidecars read after the KV prefix
    with their trailing keys re-aligned (_sync_trailing_keys)."""

    def __init__(self, node, kv_pool, sidecars: dict, model: str, extra: dict | None = None, **kw):
        super().__init__(node, kv_pool, model, extra, **kw)
        self.sidecars = sidecars
        self.backend.register_mem_host_pool_v2(kv_pool, "kv")
        from sglang.srt.mem_cache.hicache_storage import PoolName

        for name, pool in sidecars.items():
            self.backend.register_mem_host_pool_v2(pool, PoolName(name))

    def should_backup(self, transfer) -> bool:
        return not self.backup_skip or transfer.name == "mamba"

    def backup(self, hash_value, host_indices, pool_transfers=None) -> int:
        ts = [t for t in pool_transfers or [] if self.should_backup(t)]
        for t in ts:
            if t.indices_from_pool == "kv":
                t.host_indices = host_indices
                if t.keys is None:
                    t.keys = hash_value
        self.sidecar_set = self.backend.batch_set_v2(ts) if ts else {}
        return super().backup(hash_value, host_indices)

    def hit_query(self, page_hashes, pool_transfers=None):
        from sglang.srt.mem_cache.hicache_storage import HiCacheStorageExtraInfo

        if not pool_transfers:
            return super().hit_query(page_hashes)
        res = self.backend.batch_exists_v2(page_hashes, pool_transfers, HiCacheStorageExtraInfo(prefix_keys=None))
        self.last_exists = res
        return page_hashes[:res.kv_hit_pages], res.kv_hit_pages * self.page_size

    def prefetch(self, hash_value, host_indices, pool_transfers=None) -> int:
        from sglang.srt.mem_cache.hicache_storage import count_pool_hits

        kv_pages = super().prefetch(hash_value, host_indices, pool_transfers)
        self.pool_hits = {}
        if pool_transfers and kv_pages == len(hash_value):
            nonkv = [t for t in pool_transfers if t.indices_from_pool != "kv"]
            for t in nonkv:  # _sync_trailing_keys
                if t.hit_policy == "trailing_pages":
                    n = len(t.keys) if t.keys else 1
                    t.keys = hash_value[max(0, kv_pages - n):kv_pages]
                    need = len(t.keys) * self.sidecars[t.name].page_size
                    t.host_indices = t.host_indices[:need]
            self.pool_hits = count_pool_hits(self.backend.batch_get_v2(nonkv))
        return kv_pages


# --- the scenarios ---------------------------------------------------------------------------

MHA_LAYOUTS = ["page_first", "page_first_direct", "page_head", "layer_first"]
MLA_LAYOUTS = ["page_first", "page_first_direct", "layer_first"]


def make_pool(kind: str, layout: str, pages: int, **kw):
    return (MLAHost if kind == "mla" else MHAHost)(pages, layout, **kw)


def with_v1(v1):
    """The README's extra config with interface_v1 as given (None: removed)."""
    extra = readme_extra_config()
    extra.pop("interface_v1", None)
    if v1 is not None:
        extra["interface_v1"] = v1
    return extra


def test_readme_config_selects_zero_copy():
    """The README's extra config loads the backend through the factory's dynamic path and
    makes SGLang's controller take the zero-copy v1 calls."""
    extra = readme_extra_config()
    assert extra["module_path"] == "kvoffload.sglang" and extra["class_name"] == "HiCacheKVOffload"
    assert bool(extra.get("interface_v1", 0)) and "addrs" in extra
    import kvoffload.sglang as ks

    assert set(extra) <= set(ks.OPTIONS) | set(ks.SGLANG_OPTIONS)


@pytest.mark.parametrize("reader_v1", [None, 1], ids=["read-generic", "read-v1"])
@pytest.mark.parametrize("writer_v1", [None, 1], ids=["write-generic", "write-v1"])
@pytest.mark.parametrize("kind,layout", [("mha", lo) for lo in MHA_LAYOUTS] + [("mla", lo) for lo in MLA_LAYOUTS])
def test_controller_write_back_hit_query_prefetch(node1, seed, kind, layout, writer_v1, reader_v1):
    """One instance backs a request's pages up (SGLang's _page_backup), another asks for
    them (_storage_hit_query) and loads them into its own host pool (_page_transfer), each
    with or without interface_v1: every page is found and loaded byte for byte, whichever
    path wrote it and whichever reads it (the issue: without interface_v1 SGLang wrote with
    batch_set and found 0 pages)."""
    rnd, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    n = rnd.randint(1, 12)
    model = f"org/{kind}-{layout}-{seed}"
    src, dst = make_pool(kind, layout, 16), make_pool(kind, layout, 16)
    pool_random(src, gen)
    keys = chain(f"wb/{seed}/{kind}/{layout}/{writer_v1}/{reader_v1}", n)
    src_slots = rnd.sample(range(16), n)
    dst_slots = rnd.sample(range(16), n)
    w = Controller(node1, src, model, with_v1(writer_v1), is_mla=kind == "mla")
    r = Controller(node1, dst, model, with_v1(reader_v1), is_mla=kind == "mla")
    try:
        ps = src.page_size
        assert r.hit_query(keys) == ([], 0)
        assert w.backup(keys, hidx(src_slots, ps)) == n * ps
        writes = {c[0] for c in w.spy.calls}
        assert writes == ({"batch_set_v1"} if writer_v1 else {"batch_set"})
        hashes, hit = r.hit_query(keys + chain("absent", 2))
        assert (hashes, hit) == (keys, n * ps)
        assert r.prefetch(hashes, hidx(dst_slots, ps)) == n
        assert [dst.page(d) for d in dst_slots] == [src.page(s) for s in src_slots]
        reads = {c[0] for c in r.spy.calls} - {"batch_exists"}
        assert reads == ({"batch_get_v1"} if reader_v1 else {"batch_get"})
        # Every path agrees on every page: exists, batch_exists, get into a flat page.
        assert all(r.backend.exists(k) for k in keys) and r.backend.batch_exists(keys) == n
        flat = dst.get_dummy_flat_data_page()
        assert r.backend.get(keys[0], flat) is flat
        assert bytes(flat.view(torch.uint8).numpy()) == src.page(src_slots[0])
        copied = layout == "layer_first"  # no per-part page buffers: copied through get_data_page
        assert (w.backend.get_stats()["pages_copied"] > 0) == (copied and bool(writer_v1))
    finally:
        w.close()
        r.close()


def test_exists_get_set_agree(node1, seed):
    """The issue's failure, direct: pages stored with batch_set (SGLang without
    interface_v1) are found by exists and batch_exists and read by batch_get_v1; pages
    stored with batch_set_v1 are found and read by the generic calls."""
    gen = torch.Generator().manual_seed(seed)
    pool = MHAHost(8)
    pool_random(pool, gen)
    c = Controller(node1, pool, f"agree-{seed}", with_v1(None))
    b = c.backend
    try:
        a, z = chain(f"agree/{seed}/a", 3), chain(f"agree/{seed}/z", 3)
        assert b.batch_exists(a) == 0 and not b.exists(a[0])
        assert b.batch_set(a, [pool.get_data_page(s * pool.page_size) for s in range(3)])
        assert [b.exists(k) for k in a] == [True] * 3 and b.batch_exists(a) == 3
        assert b.batch_set_v1(z, hidx([3, 4, 5], pool.page_size)) == [True] * 3
        assert b.batch_exists(z) == 3
        got = MHAHost(8)
        b.register_mem_pool_host(got)
        assert b.batch_get_v1(a, hidx([5, 6, 7], 4)) == [True] * 3
        dummies = [got.get_dummy_flat_data_page() for _ in z]
        assert b.batch_get(z, dummies) == dummies
        assert [got.page(s) for s in (5, 6, 7)] == [pool.page(s) for s in range(3)]
        assert [bytes(d.view(torch.uint8).numpy()) for d in dummies] == [pool.page(s) for s in (3, 4, 5)]
        # A page missing one half is not there, on every path.
        key = b._base(a[1], "kv") + "_v"
        assert b.client.remove([key])[0].removed
        assert not b.exists(a[1]) and b.batch_exists(a) == 1
        assert b.batch_get_v1(a, hidx([0, 1, 2], 4)) == [True, False, True]
    finally:
        c.close()


def test_storage_batch_size(node1, seed):
    """A request of 300 pages: SGLang's controller calls in batches of STORAGE_BATCH_SIZE
    (128, 128, 44) for the backup, the hit query and the prefetch; every page arrives."""
    gen = torch.Generator().manual_seed(seed)
    src, dst = MHAHost(300, page_size=1, layers=2, heads=1, head_dim=8), MHAHost(300, page_size=1, layers=2, heads=1,
                                                                               head_dim=8)
    pool_random(src, gen)
    keys = chain(f"bs/{seed}", 300)
    w = Controller(node1, src, f"bs-{seed}")
    r = Controller(node1, dst, f"bs-{seed}")
    try:
        perm = torch.randperm(300, generator=gen).tolist()
        assert w.backup(keys, hidx(range(300), 1)) == 300
        assert w.spy.calls == [("batch_set_v1", 128), ("batch_set_v1", 128), ("batch_set_v1", 44)]
        assert r.hit_query(keys) == (keys, 300)
        assert r.prefetch(keys, hidx(perm, 1)) == 300
        assert r.spy.calls == [("batch_exists", 128), ("batch_exists", 128), ("batch_exists", 44),
                               ("batch_get_v1", 128), ("batch_get_v1", 128), ("batch_get_v1", 44)]
        assert all(dst.page(perm[i]) == src.page(i) for i in range(300))
    finally:
        w.close()
        r.close()


def test_big_pages_pieces_and_transactions(node1, seed, monkeypatch):
    """Pages over one object (MaxObjectBytes) are kept as pieces, and a call's objects over
    one transaction's limits (MaxBatchKeys, MaxBatchBytes) go in several: both paths still
    agree page for page. The limits are lowered to exercise this with small pages."""
    import kvoffload.sglang as ks

    monkeypatch.setattr(ks, "_MAX_OBJECT", 100)
    monkeypatch.setattr(ks, "_MAX_TXN_BYTES", 1000)
    monkeypatch.setattr(ks, "_MAX_TXN_KEYS", 7)
    gen = torch.Generator().manual_seed(seed)
    src = MHAHost(6, page_size=2, layers=2, heads=1, head_dim=20)  # halves of 160 bytes: 2 pieces each
    dst = MHAHost(6, page_size=2, layers=2, heads=1, head_dim=20)
    pool_random(src, gen)
    keys = chain(f"big/{seed}", 6)
    w = Controller(node1, src, f"big-{seed}")
    r = Controller(node1, dst, f"big-{seed}", with_v1(None))
    txns = []
    orig = w.backend.client.batch_offload
    monkeypatch.setattr(w.backend.client, "batch_offload", lambda t, objs, **kw: txns.append(len(objs)) or orig(t, objs, **kw))
    try:
        assert w.backup(keys, hidx(range(6), 2)) == 12
        assert sum(txns) == 6 * 4 and max(txns) <= 7 and len(txns) > 1
        base = w.backend._base(keys[0], "kv")
        assert all(e.ok for e in w.backend.client.batch_get([base + s for s in ("_k.0", "_k.1", "_v.0", "_v.1")]))
        assert r.hit_query(keys) == (keys, 12)
        assert r.prefetch(keys, hidx([5, 4, 3, 2, 1, 0], 2)) == 6
        assert [dst.page(5 - i) for i in range(6)] == [src.page(i) for i in range(6)]
    finally:
        w.close()
        r.close()


def test_keys_carry_ranks_as_the_file_backend(node1, seed):
    """Keys are HiCacheFile's (<hash>_<model>[_<tp>_<tp size>][_<pp size>_<pp rank>]
    [_cp<rank>_<size>]) with the host pool's layout and dtype: MHA TP ranks keep their own
    halves of the same page hashes (no Conflict), MLA is written by TP rank 0 and read by the
    others, PP and CP ranks are apart."""
    gen = torch.Generator().manual_seed(seed)
    model = f"org/ranks-{seed}"
    keys = chain(f"rk/{seed}", 3)
    ctl = []
    try:
        mha = []
        for rank in range(2):
            p = MHAHost(4)
            pool_random(p, gen)
            c = Controller(node1, p, model, tp=(rank, 2))
            ctl.append(c)
            mha.append((c, p))
            assert c.backup(keys, hidx([0, 1, 2], 4)) == 12
            assert c.backend._base(keys[0], "kv") == f"{keys[0]}_org-ranks-{seed}_{rank}_2_page_first_bfloat16"
        for c, p in mha:
            back = MHAHost(4)
            c.backend.register_mem_pool_host(back)
            assert c.backend.batch_get_v1(keys, hidx([3, 2, 1], 4)) == [True] * 3
            assert [back.page(s) for s in (3, 2, 1)] == [p.page(s) for s in (0, 1, 2)]
        assert all(c.backend.get_stats()["conflicts"] == 0 for c, _ in mha)
        # MLA: replicated over TP, so rank 0 writes it and rank 1 finds and reads it.
        src = MLAHost(4)
        pool_random(src, gen)
        w = Controller(node1, src, model, tp=(0, 2), is_mla=True)
        other = MLAHost(4)
        r = Controller(node1, other, model, tp=(1, 2), is_mla=True)
        ctl += [w, r]
        assert r.backup(keys, hidx([0, 1, 2], 4)) == 0  # backup_skip on TP rank 1
        assert w.backup(keys, hidx([0, 1, 2], 4)) == 12
        assert w.backend._base(keys[0], "kv") == f"{keys[0]}_org-ranks-{seed}_page_first_bfloat16"
        assert r.hit_query(keys) == (keys, 12) and r.prefetch(keys, hidx([1, 2, 3], 4)) == 3
        assert [other.page(s) for s in (1, 2, 3)] == [src.page(s) for s in (0, 1, 2)]
        # PP and attention-CP ranks: each its own objects, named as HiCacheFile names them.
        for pp, cp, tail in [((1, 2), (0, 1), "_0_1_2_1"), ((0, 1), (1, 2), "_0_1_cp1_2")]:
            p = MHAHost(4)
            pool_random(p, gen)
            c = Controller(node1, p, model, pp=pp, cp=cp)
            ctl.append(c)
            assert c.backend._base(keys[0], "kv") == f"{keys[0]}_org-ranks-{seed}{tail}_page_first_bfloat16"
            assert c.hit_query(keys) == ([], 0)
            assert c.backup(keys, hidx([0, 1, 2], 4)) == 12 and c.hit_query(keys) == (keys, 12)
    finally:
        for c in ctl:
            c.close()


def test_layouts_and_dtypes_are_apart(node1, seed):
    """Instances whose host pools differ in layout or KV dtype hold the same page hashes in
    different bytes; their keys differ, so none reads another's bytes as its own."""
    gen = torch.Generator().manual_seed(seed)
    keys = chain(f"fmt/{seed}", 2)
    ctl = []
    try:
        for layout, dtype in [("page_first", torch.bfloat16), ("page_first_direct", torch.bfloat16),
                              ("page_first", torch.float16)]:
            p = MHAHost(4, layout, dtype=dtype)
            pool_random(p, gen)
            c = Controller(node1, p, f"fmt-{seed}")
            ctl.append(c)
            assert c.hit_query(keys) == ([], 0), (layout, dtype)
            assert c.backup(keys, hidx([0, 1], 4)) == 8
    finally:
        for c in ctl:
            c.close()


def mamba_transfer(keys, slots, n_trailing=1):
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

    return PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor(slots, dtype=torch.int64), keys=list(keys),
                        hit_policy=PoolHitPolicy.TRAILING_PAGES)


def test_hybrid_mamba_write_back_hit_query_prefetch(node1, seed):
    """A hybrid (KV + Mamba) model through SGLang's hybrid controller: the Mamba state of the
    request's last page written with batch_set_v2 (TRAILING_PAGES), the KV pages with
    batch_set_v1; batch_exists_v2 finds the request; the prefetch loads the KV pages and, with
    its trailing keys re-aligned, the Mamba state into another instance's pools, byte for
    byte. Under MLA with TP the Mamba state is TP-sharded: each rank keeps its own."""
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

    gen = torch.Generator().manual_seed(seed)
    rnd = random.Random(seed)
    n = rnd.randint(2, 9)
    keys = chain(f"hy/{seed}", n)
    model = f"hybrid-{seed}"
    ctl = []
    try:
        kv, mamba = MHAHost(12), MambaHost(4)
        pool_random(kv, gen)
        mamba.randomize(gen)
        w = HybridController(node1, kv, {"mamba": mamba}, model)
        ctl.append(w)
        assert w.backup(keys, hidx(range(n), 4), [mamba_transfer(keys[-1:], [2])]) == n * 4
        assert w.sidecar_set == {PoolName.MAMBA: [True]}
        kv2, mamba2 = MHAHost(12), MambaHost(4)
        r = HybridController(node1, kv2, {"mamba": mamba2}, model, with_v1(None))
        ctl.append(r)
        probe = [PoolTransfer(name=PoolName.MAMBA, keys=["placeholder"], hit_policy=PoolHitPolicy.TRAILING_PAGES)]
        hashes, hit = r.hit_query(keys + chain("tail", 2), probe)
        assert (hashes, hit) == (keys, n * 4)
        assert r.last_exists.extra_pool_hit_pages == {"kv": n, "mamba": n}
        load = [mamba_transfer(["placeholder"], [0, 1, 3])]  # a window allocated for more than the hit
        assert r.prefetch(hashes, hidx(range(11 - n, 11), 4), load) == n
        assert r.pool_hits == {PoolName.MAMBA: 1} and load[0].keys == keys[-1:]
        assert mamba2.page(0) == mamba.page(2)
        assert [kv2.page(11 - n + i) for i in range(n)] == [kv.page(i) for i in range(n)]
        # A prefix whose last page has no Mamba state is not restorable: the hit stops at the
        # last page that has one (none here).
        assert r.hit_query(keys[:-1], probe) == ([], 0)
        # MLA + TP: Mamba objects carry the TP rank, KV objects do not.
        for rank in range(2):
            kvm, mam = MLAHost(8), MambaHost(2)
            pool_random(kvm, gen)
            mam.randomize(gen)
            c = HybridController(node1, kvm, {"mamba": mam}, model, tp=(rank, 2), is_mla=True)
            ctl.append(c)
            done = c.backup(keys[:2], hidx([0, 1], 4), [mamba_transfer(keys[1:2], [rank])])
            assert done == (8 if rank == 0 else 0) and c.sidecar_set == {PoolName.MAMBA: [True]}
            assert c.backend._base(keys[1], "mamba").endswith(f"_{model}_{rank}_2_page_first_bfloat16")
            back = MambaHost(2)
            c.backend.register_mem_host_pool_v2(back, PoolName.MAMBA)
            got = c.backend.batch_get_v2([mamba_transfer(keys[1:2], [1 - rank])])
            assert got == {PoolName.MAMBA: [True]} and back.page(1 - rank) == mam.page(rank)
    finally:
        for c in ctl:
            c.close()


def test_kv_derived_indexer_pool(node1, seed):
    """A KV-derived sidecar pool (an indexer pool riding the KV host indices,
    indices_from_pool=KV, ALL_PAGES) written by the hybrid backup and read batch by batch with
    the KV pages (_page_transfer_kv_batch): the prefetch is clamped to the pages both have."""
    from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer

    gen = torch.Generator().manual_seed(seed)
    keys = chain(f"ix/{seed}", 5)
    kv, ix = MLAHost(8), MLAHost(8, kv_dim=6, dtype=torch.uint8)
    pool_random(kv, gen)
    pool_random(ix, gen)
    w = HybridController(node1, kv, {"indexer": ix}, f"ix-{seed}", is_mla=True)
    kv2, ix2 = MLAHost(8), MLAHost(8, kv_dim=6, dtype=torch.uint8)
    r = HybridController(node1, kv2, {"indexer": ix2}, f"ix-{seed}", is_mla=True)
    try:
        t = PoolTransfer(name=PoolName.INDEXER, indices_from_pool=PoolName.KV)
        assert w.backup(keys, hidx(range(5), 4), [t]) == 20 and w.sidecar_set == {PoolName.INDEXER: [True] * 5}
        assert r.backend.client.remove([w.backend._base(keys[3], "indexer") + "_0"])[0].removed
        probe = [PoolTransfer(name=PoolName.INDEXER, indices_from_pool=PoolName.KV)]
        assert r.hit_query(keys, probe) == (keys[:3], 12)
        assert r.last_exists.extra_pool_hit_pages == {"kv": 5, "indexer": 3}
        assert r.prefetch(keys, hidx([7, 6, 5, 4, 3], 4), probe) == 3  # clamped to the indexer's 3
        assert [kv2.page(7 - i) for i in range(3)] == [kv.page(i) for i in range(3)]
        assert [ix2.page(7 - i) for i in range(3)] == [ix.page(i) for i in range(3)]
    finally:
        w.close()
        r.close()


def test_hit_policies(node1, seed):
    """batch_exists_v2 against an independent definition, on random holes: the answer is the
    longest prefix p of present KV pages such that every ALL_PAGES pool has pages 1..p and
    every TRAILING_PAGES pool (window n) has pages p-n+1..p; per pool, its own longest such
    prefix."""
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

    rnd, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    kv, mamba, swa = MHAHost(10, page_size=2, layers=1, heads=1, head_dim=4), MambaHost(10), \
        MHAHost(10, page_size=2, layers=1, heads=1, head_dim=2)
    for p in (kv, mamba, swa):
        pool_random(p, gen)
    c = HybridController(node1, kv, {"mamba": mamba, "swa": swa}, f"hp-{seed}")
    b = c.backend
    try:
        for trial in range(12):
            n = rnd.randint(1, 10)
            keys = chain(f"hp/{seed}/{trial}", n)
            have = {name: [rnd.random() < (0.95 if name == "kv" else 0.75) for _ in range(n)]
                    for name in ("kv", "mamba", "swa")}
            for name, pool in (("kv", kv), ("mamba", mamba), ("swa", swa)):
                ks = [k for k, h in zip(keys, have[name]) if h]
                slots = [i for i, h in enumerate(have[name]) if h]
                if not ks:
                    continue
                if name == "kv":
                    assert b.batch_set_v1(ks, hidx(slots, 2)) == [True] * len(ks)
                else:
                    idx = torch.tensor(slots) if name == "mamba" else hidx(slots, 2)
                    assert b.batch_set_v2([PoolTransfer(name=PoolName(name), host_indices=idx, keys=ks)]) == \
                        {name: [True] * len(ks)}
            window = rnd.randint(1, 3)
            pols = [("mamba", PoolHitPolicy.TRAILING_PAGES, window), ("swa", rnd.choice(list(PoolHitPolicy)), 2)]
            probe = [PoolTransfer(name=PoolName(name), keys=["x"] * w, hit_policy=pol) for name, pol, w in pols]
            res = b.batch_exists_v2(keys, probe)
            kv_pages = have["kv"].index(False) if False in have["kv"] else n

            def can(name, pol, w, p):
                if pol == PoolHitPolicy.ALL_PAGES:
                    return all(have[name][:p])
                return all(have[name][max(0, p - w):p])

            want = max([p for p in range(1, kv_pages + 1) if all(can(*x, p) for x in pols)], default=0)
            print(f"trial {trial}: have {have}, policies {pols}: {res}")
            assert res.kv_hit_pages == want
            if kv_pages:
                assert res.extra_pool_hit_pages["kv"] == kv_pages
            else:
                assert "kv" not in res.extra_pool_hit_pages
            # Per pool its own longest prefix, reported while some prefix is still restorable
            # (HiCacheFile stops looking at the pools once none is).
            left = set(range(1, kv_pages + 1))
            for name, pol, w in pols:
                if not left:
                    assert name not in res.extra_pool_hit_pages
                    continue
                own = {p for p in range(1, kv_pages + 1) if can(name, pol, w, p)}
                assert res.extra_pool_hit_pages.get(name) == (max(own) if own else None), name
                left &= own
    finally:
        c.close()


@pytest.mark.parametrize("change,error", [
    (lambda e: e.pop("addrs"), 'no "addrs"'),
    (lambda e: e.update(adrs="127.0.0.1:1"), "unknown key"),
    (lambda e: e.update(interface_v1="false"), "interface_v1 is 'false'"),
    (lambda e: e.update(interface_v1=2), "interface_v1 is 2"),
    (lambda e: e.update(tp_lcm_size=4), "tp_lcm_size"),
], ids=["no-addrs", "unknown-key", "interface_v1-string", "interface_v1-2", "tp_lcm_size"])
def test_wrong_settings_fail_at_start_up(node1, change, error):
    """A wrong or missing setting is refused when SGLang's factory constructs the backend,
    with the reason: never a backend that runs and finds nothing."""
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from sglang.srt.mem_cache.storage import StorageBackendFactory

    extra = dict(readme_extra_config(), addrs=",".join(node1.addrs))
    change(extra)
    tp_lcm = extra.pop("tp_lcm_size", None)
    cfg = HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True, "m", tp_lcm_size=tp_lcm,
                               should_split_heads=tp_lcm is not None, extra_config=extra)
    with pytest.raises(ValueError, match=re.escape(error)):
        StorageBackendFactory.create_backend("dynamic", cfg, None)


def test_unreachable_store_and_no_model_fail_at_start_up(node1, caplog):
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from sglang.srt.mem_cache.storage import StorageBackendFactory

    import kvoffload

    extra = dict(readme_extra_config(), addrs=conftest.free_addr())
    cfg = HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True, "m", extra_config=extra)
    with pytest.raises(kvoffload.UnreachableError):
        StorageBackendFactory.create_backend("dynamic", cfg, None)
    cfg = HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True, None, extra_config=dict(extra))
    with pytest.raises(ValueError, match="no model_name"):
        StorageBackendFactory.create_backend("dynamic", cfg, None)
    # A missing interface_v1 works (rule 1) and says what it costs.
    caplog.set_level(logging.WARNING, logger="kvoffload.sglang")
    c = Controller(node1, MHAHost(2), "m", with_v1(None))
    c.close()
    assert '"interface_v1" is not in the extra config' in caplog.text


def test_nothing_raises_into_sglang(node1, seed, caplog):
    """Calls SGLang's storage threads make never raise (HiCache would lose L3 for good):
    wrong host index counts, unregistered pools and a closed client are answered False / 0
    and logged."""
    from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer

    pool = MHAHost(4)
    c = Controller(node1, pool, f"nr-{seed}")
    b = c.backend
    keys = chain(f"nr/{seed}", 2)
    assert b.batch_set_v1(keys, hidx([0], 4)) == [False, False]
    assert "host indices" in caplog.text
    t = PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([0]), keys=keys[:1])
    assert b.batch_set_v2([t]) == {PoolName.MAMBA: [False]} and b.batch_get_v2([t]) == {PoolName.MAMBA: [False]}
    assert b.batch_exists_v2(keys, [t]).kv_hit_pages == 0
    b.close()
    assert b.batch_set_v1(keys, hidx([0, 1], 4)) == [False, False]
    assert b.batch_get_v1(keys, hidx([0, 1], 4)) == [False, False]
    assert b.batch_exists(keys) == 0 and b.exists(keys[0]) is False
    assert b.batch_set(keys, [pool.get_data_page(0), pool.get_data_page(4)]) is False
    assert b.batch_get(keys, [pool.get_dummy_flat_data_page()] * 2) == [None, None]
    assert b.batch_exists_v2(keys, [t]).kv_hit_pages == 0


def test_older_storage_config(node1, seed):
    """An older SGLang's HiCacheStorageConfig (hicache_storage.py at
    bb424de23a4659f89cfd97dcad3aa1935a1e1d3e: tp_rank, tp_size, is_mla_model,
    is_page_first_layout, model_name, extra_config; no PP, CP or DP fields) loads, keys as
    that version's HiCacheFile does, and moves pages."""
    from types import SimpleNamespace

    import kvoffload.sglang as ks

    gen = torch.Generator().manual_seed(seed)
    cfg = SimpleNamespace(tp_rank=1, tp_size=2, is_mla_model=False, is_page_first_layout=True, model_name=f"old/{seed}",
                          extra_config=dict(readme_extra_config(), addrs=",".join(node1.addrs)))
    src, dst = MHAHost(4), MHAHost(4)
    pool_random(src, gen)
    b = ks.HiCacheKVOffload(cfg, {})
    try:
        b.register_mem_pool_host(src)
        keys = chain(f"old/{seed}", 2)
        assert b._base(keys[0], "kv") == f"{keys[0]}_old-{seed}_1_2_page_first_bfloat16"
        assert b.batch_set_v1(keys, hidx([0, 1], 4)) == [True, True] and b.batch_exists(keys) == 2
        b.register_mem_pool_host(dst)
        assert b.batch_get_v1(keys, hidx([2, 3], 4)) == [True, True]
        assert [dst.page(2), dst.page(3)] == [src.page(0), src.page(1)]
    finally:
        b.close()
