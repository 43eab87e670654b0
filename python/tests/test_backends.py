"""Each engine backend loaded the way its engine loads it (the documented configuration,
through the engine stub's loader), against a fake host pool and a real storenode serve:
round trip, the seed scenario (32 threads offloading shared-prefix keys: no failed batch, no
missing key), and the behaviour each engine relies on."""

from __future__ import annotations

import asyncio
import hashlib
import random
import threading
import time
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import payload


def chain(prefix: str, n: int, salt: str = ""):
    """SGLang-style chained page hashes: key_i = sha256(key_{i-1} + tokens_i)."""
    keys, prev = [], prefix
    for i in range(n):
        prev = hashlib.sha256(f"{prev}|{salt}{i}".encode()).hexdigest()
        keys.append(prev)
    return keys


def shared_prefix_requests(rnd, seed, n_req, max_len=8):
    """Requests whose page-key chains share prefixes (a few conversations, varied depths)."""
    roots = [chain(f"{seed}/conv{c}", max_len) for c in range(5)]
    reqs = []
    for r in range(n_req):
        base = rnd.choice(roots)[: rnd.randint(1, max_len)]
        reqs.append(base + chain(base[-1], rnd.randint(0, 2), salt=f"r{r}-"))
    return reqs


def run32(fn, items):
    errs = []

    def worker(w):
        try:
            for it in items[w::32]:
                fn(w, it)
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errs.append(e)

    ts = [threading.Thread(target=worker, args=(w,)) for w in range(32)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errs, errs[:3]


# --- SGLang -------------------------------------------------------------------------------

PAGE, ROW = 4, 1024  # tokens per page, bytes per token per K (or V) half


class FakeHostPool:
    """SGLang's page_first MHA host pool as the backend sees it (pool_host.py
    get_page_buffer_meta: per page a K and a V pointer of page_size * bytes per token)."""

    def __init__(self, pages: int):
        self.page_size = PAGE
        self.kv_buffer = np.zeros((2, pages * PAGE, ROW), dtype=np.uint8)

    def get_page_buffer_meta(self, indices):
        ptrs = []
        for i in range(0, len(indices), self.page_size):
            start = int(indices[i])
            ptrs += [self.kv_buffer[0, start].ctypes.data, self.kv_buffer[1, start].ctypes.data]
        return ptrs, [PAGE * ROW] * len(ptrs)

    def fill(self, slot: int, key: str) -> None:
        for half in (0, 1):
            self.kv_buffer[half, slot * PAGE:(slot + 1) * PAGE] = np.frombuffer(
                payload(f"{key}/{half}", PAGE * ROW), np.uint8).reshape(PAGE, ROW)

    def check(self, slot: int, key: str) -> bool:
        return all(self.kv_buffer[half, slot * PAGE:(slot + 1) * PAGE].tobytes() == payload(f"{key}/{half}", PAGE * ROW)
                   for half in (0, 1))


def sglang_backend(node, model: str, pool: FakeHostPool, addrs: str = ""):
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    # The documented --hicache-storage-backend-extra-config, parsed by SGLang into extra_config.
    extra = {"backend_name": "kvoffload", "module_path": "kvoffload.sglang", "class_name": "HiCacheKVOffload",
             "interface_v1": 1, "addrs": addrs or ",".join(node.addrs)}
    cfg = HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                               is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                               model_name=model, extra_config=extra)
    b = StorageBackendFactory.create_backend("dynamic", cfg, pool)
    b.register_mem_pool_host(pool)
    return b


def idx(slots):
    return np.array([s * PAGE + t for s in slots for t in range(PAGE)], dtype=np.int64)


def test_sglang_round_trip(node1, seed):
    src, dst = FakeHostPool(8), FakeHostPool(8)
    b = sglang_backend(node1, f"org/model-{seed}", src)
    keys = chain(f"sg/{seed}", 5)
    for s, k in enumerate(keys):
        src.fill(s, k)
    assert b.batch_exists(keys) == 0
    assert b.batch_set_v1(keys, idx(range(5))) == [True] * 5
    assert b.batch_set_v1(keys[:2], idx(range(2))) == [True, True]  # AlreadyStored is success
    assert b.batch_exists(keys + chain("other", 1)) == 5
    b.register_mem_pool_host(dst)
    assert b.batch_get_v1(keys, idx([3, 4, 5, 6, 7])) == [True] * 5
    assert all(dst.check(3 + i, k) for i, k in enumerate(keys))
    assert b.batch_get_v1(chain("missing", 1), idx([0])) == [False]
    # The key carries the model suffix and the K/V part (HiCacheFile's suffix scheme).
    got = b.client.batch_get([f"{keys[0]}_org-model-{seed}_0_1_k"])
    assert got[0].ok and got[0].value == payload(f"{keys[0]}/0", PAGE * ROW)
    # The generic interface, into a caller's buffer.
    buf = np.zeros(100, np.uint8)
    assert b.set("plain", np.full(100, 7, np.uint8)) and b.exists("plain")
    assert b.get("plain", buf) is buf and (buf == 7).all()
    # A collision (same key, other bytes) is reported, not overwritten.
    assert b.set("plain", np.full(100, 8, np.uint8)) is False
    assert b.get_stats()["pages_set"] == 7
    b.close()


def test_sglang_conflict_is_visible(node1, seed, caplog):
    pool = FakeHostPool(2)
    b = sglang_backend(node1, f"m-{seed}", pool)
    k = chain(f"sgc/{seed}", 1)
    pool.fill(0, k[0])
    assert b.batch_set_v1(k, idx([0])) == [True]
    pool.fill(0, "different bytes")
    assert b.batch_set_v1(k, idx([0])) == [False]
    assert "holds other bytes" in caplog.text and b.get_stats()["conflicts"] >= 1
    b.close()


def test_sglang_seed_scenario(node1, seed):
    rnd = random.Random(seed)
    reqs = shared_prefix_requests(rnd, f"sgs/{seed}", 96)
    pools = [FakeHostPool(16) for _ in range(32)]
    backends = [sglang_backend(node1, f"seed-{seed}", p) for p in pools]
    failed = []

    def offload(w, req):
        for s, k in enumerate(req):
            pools[w].fill(s, k)
        ok = backends[w].batch_set_v1(req, idx(range(len(req))))
        if not all(ok):
            failed.append((req, ok))

    run32(offload, reqs)
    assert not failed, failed[:2]
    reader, pool = backends[0], FakeHostPool(16)
    reader.register_mem_pool_host(pool)
    for req in reqs:
        assert reader.batch_exists(req) == len(req)
        assert reader.batch_get_v1(req, idx(range(len(req)))) == [True] * len(req)
        assert all(pool.check(s, k) for s, k in enumerate(req))
    for b in backends:
        b.close()


# --- LMCache ------------------------------------------------------------------------------
# LMCache's own contract (allocator, lookup IDs, gaps, names) is tests/test_lmcache_engine.py.


def lmcache_backend(node):
    """The plugin as LMCache's storage_plugin_launcher makes it from the documented
    configuration, reading into the stub LocalCPUBackend (tests/stubs/lmcache)."""
    from lmcache.v1.storage_backend import storage_plugin_launcher
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

    config = SimpleNamespace(storage_plugins=["kvoffload"], extra_config={
        "storage_plugin.kvoffload.module_path": "kvoffload.lmcache",
        "storage_plugin.kvoffload.class_name": "KVOffloadBackend",
        "storage_plugin.kvoffload.addrs": ",".join(node.addrs)})
    backends = OrderedDict()
    storage_plugin_launcher(config, None, None, LocalCPUBackend(), "cpu", backends)
    return backends["kvoffload"]


def chunk(key, shape=(2, 4, 16, 8), cpu=None):
    """A KV_2LTD float16 chunk allocated from the local CPU backend, its bytes derived from
    the key."""
    import torch
    from lmcache.v1.memory_management import MemoryFormat
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

    o = (cpu or LocalCPUBackend()).allocate(torch.Size(shape), torch.float16, MemoryFormat.KV_2LTD)
    o.byte_array.cast("B")[:] = payload(key.to_string(), o.get_size())
    return o


def lm_keys(hashes, model="m"):
    import torch
    from lmcache.utils import CacheEngineKey

    return [CacheEngineKey(model, 1, 0, int(h[:15], 16), torch.float16) for h in hashes]


def test_lmcache_round_trip(node1, seed):
    b = lmcache_backend(node1)
    cpu = b.local_cpu_backend
    keys = lm_keys(chain(f"lm/{seed}", 4))
    objs = [chunk(k, cpu=cpu) for k in keys]
    assert b.batched_contains(keys) == 0
    futs = b.batched_submit_put_task(keys, objs)
    assert all(f.result(30) for f in futs)
    assert all(o.get_ref_count() == 1 for o in objs)  # taken for the put, given back after
    assert not b.exists_in_put_tasks(keys[0])
    assert b.contains(keys[0]) and b.batched_contains(keys + lm_keys(["f" * 16])) == 4
    assert asyncio.run(b.batched_async_contains("lookup-1", keys, pin=True)) == 4
    got = b.batched_get_blocking(keys)
    for o, g in zip(objs, got):
        assert g.get_shapes() == o.get_shapes() and g.get_dtypes() == o.get_dtypes()
        assert g.get_memory_format() == o.get_memory_format() and bytes(g.byte_array) == bytes(o.byte_array)
    assert len(asyncio.run(b.batched_get_non_blocking("lookup-2", keys))) == 4
    assert b.pin(keys[0]) and b.unpin(keys[0])
    assert b.remove(keys[0]) and b.batched_remove(keys[1:]) == 3 and b.get_blocking(keys[0]) is None
    assert b.get_allocator_backend() is b.local_cpu_backend
    b.close()


def test_lmcache_seed_scenario(node1, seed):
    rnd = random.Random(seed)
    reqs = [lm_keys(r, model=f"seed-{seed}") for r in shared_prefix_requests(rnd, f"lms/{seed}", 96)]
    b = lmcache_backend(node1)
    failed = []

    def put(w, keys):
        objs = [chunk(k, cpu=b.local_cpu_backend) for k in keys]
        futs = b.batched_submit_put_task(keys, objs)
        for o in objs:
            o.ref_count_down()  # StorageManager.batched_put drops its reference at once
        if not all(f.result(60) for f in futs):
            failed.append(keys)

    run32(put, reqs)
    assert not failed, failed[:2]
    for keys in reqs:
        assert b.batched_contains(keys) == len(keys)
        got = b.batched_get_blocking(keys)
        assert all(g is not None and bytes(g.byte_array) == payload(k.to_string(), g.get_size())
                   for k, g in zip(keys, got))
        for g in got:
            g.ref_count_down()
    assert b.local_cpu_backend.memory_allocator.live == 0
    b.close()


# --- vLLM ---------------------------------------------------------------------------------
# vLLM's own contract (LookupResult, job types, events, the previous interface) is
# tests/test_vllm_engine.py.

BLOCK = 8 << 10


def vllm_tier(node, blocks=64, namespace=""):
    import kvoffload.vllm
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    kvoffload.vllm.register()  # what the vllm.general_plugins entry point does
    raw = bytearray(blocks * BLOCK)
    view = memoryview(raw).cast("B", shape=(blocks, BLOCK))  # the primary tier's view
    # One entry of the documented "secondary_tiers" list.
    tier = SecondaryTierFactory.create_secondary_tier(
        {"type": "kvoffload", "addrs": ",".join(node.addrs), "namespace": namespace}, view, SimpleNamespace())
    return tier, raw


def job(job_id, keys, rows, promotion):
    from vllm.v1.kv_offload.tiering.base import TransferJob

    return TransferJob(job_id, keys, np.asarray(rows), promotion, None)


def wait_jobs(tier, ids, timeout=60):
    done, deadline = {}, time.monotonic() + timeout
    while set(ids) - set(done):
        assert time.monotonic() < deadline, f"jobs {set(ids) - set(done)} not finished"
        for r in tier.get_finished_jobs():
            done[r.job_id] = r.success
        time.sleep(0.002)
    return done


def wait_lookup(tier, key, timeout=10):
    """The tier's answer once it is not RETRY: LookupResult.HIT or MISS."""
    from vllm.v1.kv_offload.base import LookupResult

    deadline = time.monotonic() + timeout
    while (r := tier.lookup(key, None)) is LookupResult.RETRY:
        assert time.monotonic() < deadline, "lookup stayed RETRY"
        time.sleep(0.002)
    return r


def vkeys(hashes):
    from vllm.v1.kv_offload.base import make_offload_key

    return [make_offload_key(bytes.fromhex(h), 0) for h in hashes]


def fill(raw, block, key):
    raw[block * BLOCK:(block + 1) * BLOCK] = payload(key.hex(), BLOCK)


def test_vllm_round_trip(node1, seed):
    from vllm.v1.kv_offload.base import LookupResult

    tier, raw = vllm_tier(node1, namespace=f"rt{seed}")
    keys = vkeys(chain(f"vl/{seed}", 4))
    for b, k in enumerate(keys):
        fill(raw, b, k)
    t0 = time.monotonic()
    assert tier.lookup(keys[0], None) is LookupResult.RETRY  # unknown: looked up in the background
    tier.submit_store(job(1, keys, range(4), False))
    assert time.monotonic() - t0 < 0.05, "submit must not block the scheduler"
    assert wait_jobs(tier, [1]) == {1: True}
    assert all(wait_lookup(tier, k) is LookupResult.HIT for k in keys)
    tier.submit_load(job(2, keys, range(10, 14), True))
    assert wait_jobs(tier, [2]) == {2: True}
    assert all(raw[(10 + i) * BLOCK:(11 + i) * BLOCK] == payload(k.hex(), BLOCK) for i, k in enumerate(keys))
    missing = vkeys(chain(f"vl-missing/{seed}", 1))
    assert wait_lookup(tier, missing[0]) is LookupResult.MISS
    tier.submit_load(job(3, missing, [20], True))
    assert wait_jobs(tier, [3]) == {3: False}
    tier.drain_jobs()
    tier.shutdown()


def test_vllm_seed_scenario(node1, seed):
    rnd = random.Random(seed)
    reqs = [vkeys(r) for r in shared_prefix_requests(rnd, f"vls/{seed}", 96)]
    tier, raw = vllm_tier(node1, blocks=96 * 10, namespace=f"seed{seed}")
    ids = list(range(len(reqs)))

    def store(w, j):
        keys = reqs[j]
        for i, k in enumerate(keys):
            fill(raw, j * 10 + i, k)
        tier.submit_store(job(j, keys, range(j * 10, j * 10 + len(keys)), False))

    run32(store, ids)
    done = wait_jobs(tier, ids)
    assert all(done.values()), [j for j, ok in done.items() if not ok][:5]
    raw[:] = bytes(len(raw))
    for j in ids:
        tier.submit_load(job(1000 + j, reqs[j], range(j * 10, j * 10 + len(reqs[j])), True))
    done = wait_jobs(tier, [1000 + j for j in ids])
    assert all(done.values())
    for j, keys in enumerate(reqs):
        for i, k in enumerate(keys):
            assert raw[(j * 10 + i) * BLOCK:(j * 10 + i + 1) * BLOCK] == payload(k.hex(), BLOCK)
    tier.shutdown()
