"""kvoffload.lmcache driven as LMCache drives a storage plugin, against a real storenode serve.

What was read (kvoffload/lmcache.py's docstring has the detail): LMCache/LMCache
lmcache/v1/storage_backend/abstract_backend.py (the newest stored text: StorageBackendInterface
with batched_async_contains, batched_get_non_blocking, get_allocator_backend,
batched_contains, touch_cache, cancel_request; StoragePluginInterface), batched_contains_gaps
as LMCache's own tests call it, storage_plugin_launcher (lmcache/v1/storage_backend/
__init__.py), lmcache/v1/memory_management.py (MemoryFormat, MemoryObj, the allocator's
_adapt_shapes_and_dtypes) and storage_manager.py (batched_put, async_lookup_and_prefetch).
The public index names no commit for those newest texts; the older abstract_backend.py texts
it does name are 00d44c9 and 2bbf159. This machine's mirror of LMCache stops at 54641ca
(2024-10-24), before lmcache/v1.

LMCache is not installable here (no PyPI, no CUDA), so these tests ran against the recorded
table below and the stubs in tests/stubs/lmcache, written from those texts (torch is real:
Debian's python3-torch). The table is the upstream method set: name, parameters with
defaults, return annotation, async or not, and which methods are abstract. The stub must
equal it and the plugin must implement every method with the same parameters.

The scenario tests call the plugin as LMCache's StorageManager does: the launcher builds it
from the documented configuration; puts hand it objects from the local CPU backend's
allocator and drop their own reference at once (batched_put); reads go through
batched_async_contains(lookup_id, keys, pin=True) then batched_get_non_blocking(lookup_id,
keys[:hits], {"cum_chunk_lengths": ...}) (async_lookup_and_prefetch), or the synchronous
contains / batched_contains / get_blocking. Chunks are torch tensors in LMCache's layouts
(KV_2LTD [2, layers, tokens, hidden], KV_MLA_FMT [1, layers, tokens, 576], layerwise KV_T2D
[tokens, 2, hidden], and an object of two groups), every byte compared, every allocated
object handed back (the stub allocator counts them).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import threading
import time
from collections import OrderedDict
from types import SimpleNamespace

import pytest
from signatures import params

torch = pytest.importorskip("torch")

# -- the recorded table ------------------------------------------------------------------------

# StoragePluginInterface's methods (inherited from StorageBackendInterface):
# name: (parameters without self, return annotation, async)
LMCACHE_METHODS = {
    "contains": ("(key, pin=False)", "bool", False),
    "exists_in_put_tasks": ("(key)", "bool", False),
    "batched_submit_put_task": ("(keys, objs, transfer_spec=None, on_complete_callback=None)",
                                "Union[List[Future], None]", False),
    "async_batched_submit_put_task": ("(keys, objs, transfer_spec=None, on_complete_callback=None)", "None", True),
    "get_blocking": ("(key)", "Optional[MemoryObj]", False),
    "get_non_blocking": ("(key, location=None)", "Optional[Future]", False),
    "batched_async_contains": ("(lookup_id, keys, pin=False)", "int", True),
    "batched_get_non_blocking": ("(lookup_id, keys, transfer_spec=None)", "list[MemoryObj]", True),
    "batched_get_blocking": ("(keys)", "List[Optional[MemoryObj]]", False),
    "pin": ("(key)", "bool", False),
    "unpin": ("(key)", "bool", False),
    "remove": ("(key, force=True)", "bool", False),
    "batched_remove": ("(keys, force=True)", "int", False),
    "get_allocator_backend": ("()", "AllocatorBackendInterface", False),
    "close": ("()", "None", False),
    "batched_contains": ("(keys, pin=False)", "int", False),
    "batched_contains_gaps": ("(keys, pin=False)", "Optional[Tuple[List[Tuple[int, int]], int]]", False),
    "touch_cache": ("()", "None", False),
    "cancel_request": ("(req_id)", "None", False),
}
LMCACHE_ABSTRACT = {"contains", "exists_in_put_tasks", "batched_submit_put_task", "get_blocking", "pin", "unpin",
                    "remove", "get_allocator_backend", "close"}
# storage_plugin_launcher: backend_class(config=, dst_device=, metadata=, local_cpu_backend=, loop=)
LMCACHE_INIT = "(dst_device='cuda', config=None, metadata=None, local_cpu_backend=None, loop=None)"
# AllocatorBackendInterface.allocate, what the plugin allocates its reads from
LMCACHE_ALLOCATE = ("(shapes, dtypes, fmt=<MemoryFormat.KV_2LTD: 1>, eviction=True, busy_loop=True)",
                    "Optional[MemoryObj]")


def returns(f) -> str:
    r = inspect.signature(f).return_annotation
    return (r if isinstance(r, str) else getattr(r, "__name__", repr(r))).strip("'\"")


def compatible(got: str, want: str) -> bool:
    """The same parameters in order with the same defaults; keyword-only extras allowed."""
    return got == want or got.startswith(want[:-1] + (", *" if want != "()" else "*"))


def test_stub_is_the_recorded_table():
    from lmcache.v1.storage_backend.abstract_backend import AllocatorBackendInterface, StoragePluginInterface

    import lmcache

    print(f"ran against the recorded table and the stub at {lmcache.__file__} (LMCache is not installed here)")
    assert set(StoragePluginInterface.__abstractmethods__) == LMCACHE_ABSTRACT
    public = {n for n, v in vars(StoragePluginInterface.__mro__[1]).items() if callable(v) and not n.startswith("_")}
    assert public == set(LMCACHE_METHODS), public ^ set(LMCACHE_METHODS)
    for m, (ps, ret, is_async) in LMCACHE_METHODS.items():
        f = getattr(StoragePluginInterface, m)
        assert (params(f), returns(f), inspect.iscoroutinefunction(f)) == (ps, ret, is_async), m
    assert params(StoragePluginInterface.__init__) == LMCACHE_INIT
    assert (params(AllocatorBackendInterface.allocate), returns(AllocatorBackendInterface.allocate)) == LMCACHE_ALLOCATE


def test_plugin_implements_the_recorded_table():
    import kvoffload.lmcache as kl
    from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface

    cls = kl.KVOffloadBackend
    assert issubclass(cls, StoragePluginInterface) and not cls.__abstractmethods__
    for m, (ps, ret, is_async) in LMCACHE_METHODS.items():
        assert m in vars(kl._KVOffloadBackend), f"KVOffloadBackend leaves {m} to LMCache's default"
        f = getattr(kl._KVOffloadBackend, m)
        assert compatible(params(f), ps), (m, params(f), ps)
        assert returns(f) == ret, (m, returns(f), ret)
        assert inspect.iscoroutinefunction(f) == is_async, m
    # The launcher passes all five by keyword; dst_device's default is the build's device
    # upstream (torch_device_type), "cpu" here.
    got = params(kl._KVOffloadBackend.__init__)
    assert got.startswith(LMCACHE_INIT[:-1].replace("'cuda'", "'cpu'") + ", *"), got


def test_allocator_refuses_a_tuple_shape():
    """The contract the plugin once broke: a plain tuple is a list of shapes to LMCache."""
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

    cpu = LocalCPUBackend()
    with pytest.raises(AssertionError, match="got 4 and 1"):
        cpu.allocate((2, 4, 16, 8), torch.bfloat16)
    o = cpu.allocate(torch.Size((2, 4, 16, 8)), torch.bfloat16)
    assert o.get_shapes() == [torch.Size((2, 4, 16, 8))] and o.get_size() == 2 * 4 * 16 * 8 * 2
    o.ref_count_down()
    assert cpu.memory_allocator.live == 0


# -- the engine's side ---------------------------------------------------------------------------


def extra_for(addrs, name="kvoffload", **opts):
    extra = {f"storage_plugin.{name}.module_path": "kvoffload.lmcache",
             f"storage_plugin.{name}.class_name": "KVOffloadBackend",
             f"storage_plugin.{name}.addrs": addrs}
    extra.update({f"storage_plugin.{name}.{k}": v for k, v in opts.items()})
    return extra


def launch(extra, plugins=("kvoffload",), local_cpu=None):
    """LMCache's storage_plugin_launcher on a config of storage_plugins and extra_config, with
    the local CPU backend the plugin allocates its reads from; (backends, local CPU backend)."""
    from lmcache.v1.storage_backend import storage_plugin_launcher
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

    local_cpu = local_cpu or LocalCPUBackend()
    config = SimpleNamespace(storage_plugins=list(plugins), extra_config=dict(extra))
    backends = OrderedDict()
    storage_plugin_launcher(config, None, None, local_cpu, "cpu", backends)
    return backends, local_cpu


def plugin(node):
    backends, cpu = launch(extra_for(",".join(node.addrs)))
    return backends["kvoffload"], cpu


def keys_for(tag, n, dtype=torch.bfloat16):
    """LMCache's keys of n chained chunks (chunk_hash: 60 bits of sha256)."""
    from lmcache.utils import CacheEngineKey

    return [CacheEngineKey(f"org/{tag}", 1, 0, int(hashlib.sha256(f"{tag}/{i}".encode()).hexdigest()[:15], 16), dtype)
            for i in range(n)]


# LMCache's layouts: (format name, [(shape, dtype), ...] per group)
LAYOUTS = {
    "mha": ("KV_2LTD", [((2, 4, 256, 256), torch.bfloat16)]),
    "mla": ("KV_MLA_FMT", [((1, 4, 256, 576), torch.bfloat16)]),
    "layerwise": ("KV_T2D", [((256, 2, 512), torch.float16)]),
    "two_groups": ("KV_2LTD", [((2, 4, 256, 128), torch.bfloat16), ((4, 256, 64), torch.float32)]),
}


def make_chunks(cpu, layout, keys, seed):
    """One object per key, allocated as LMCache's GPU connector does (storage_manager.allocate
    -> the local CPU backend) and filled with bytes drawn from the seed and the key (the
    same key always gets the same bytes); (objects, their bytes)."""
    from lmcache.v1.memory_management import MemoryFormat

    fmt, groups = LAYOUTS[layout]
    shapes = [torch.Size(s) for s, _ in groups]
    dtypes = [d for _, d in groups]
    objs, want = [], []
    for k in keys:
        g = torch.Generator().manual_seed(seed ^ k.chunk_hash)
        o = cpu.allocate(shapes if len(shapes) > 1 else shapes[0], dtypes if len(dtypes) > 1 else dtypes[0],
                         MemoryFormat[fmt])
        b = torch.randint(0, 256, (o.get_size(),), dtype=torch.uint8, generator=g)
        o.raw_data[:o.get_size()].copy_(b)
        objs.append(o)
        want.append(b.numpy().tobytes())
    return objs, want


def engine_put(b, keys, objs, timeout=60):
    """StorageManager.batched_put: submit, then drop the manager's own reference at once."""
    futs = b.batched_submit_put_task(keys, objs, transfer_spec=None)
    for o in objs:
        o.ref_count_down()
    return [f.result(timeout) for f in futs or []]


def engine_lookup_and_get(b, lookup_id, keys, chunk_tokens=256, pin=True):
    """StorageManager.async_lookup_and_prefetch for one backend: the hit count, then the
    prefix read with the lookup ID, zipped with the keys."""

    async def run():
        hits = await b.batched_async_contains(lookup_id, keys, pin)
        if hits == 0:
            return 0, []
        cum = [i * chunk_tokens for i in range(hits + 1)]
        objs = await b.batched_get_non_blocking(lookup_id, keys[:hits], {"cum_chunk_lengths": cum})
        return hits, list(zip(keys, objs))

    return asyncio.run(run())


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_put_contains_get_through_the_allocator(node1, seed, layout):
    from lmcache.v1.memory_management import MemoryFormat

    b, cpu = plugin(node1)
    fmt, groups = LAYOUTS[layout]
    keys = keys_for(f"{layout}-{seed}", 5)
    objs, want = make_chunks(cpu, layout, keys, seed)
    assert b.batched_contains(keys) == 0 and b.batched_contains_gaps(keys) == ([(0, 5)], 5)
    assert engine_put(b, keys, objs) == [True]
    assert cpu.memory_allocator.live == 0, "the plugin kept a reference after its put"
    assert not b.exists_in_put_tasks(keys[0])
    # The synchronous lookups, and the gap report.
    assert b.contains(keys[0]) and b.batched_contains(keys) == 5 and b.batched_contains_gaps(keys) == ([], 5)
    # The asynchronous lookup and read, with a lookup ID.
    hits, pairs = engine_lookup_and_get(b, f"req-{layout}-{seed}", keys)
    assert hits == 5 and [k for k, _ in pairs] == keys
    for (_, o), w in zip(pairs, want):
        assert o.get_memory_format() == MemoryFormat[fmt]
        assert o.get_shapes() == [torch.Size(s) for s, _ in groups] and o.get_dtypes() == [d for _, d in groups]
        assert isinstance(o.get_shape(), torch.Size) and o.get_size() == len(w)
        assert bytes(o.byte_array) == w
        for i, (s, d) in enumerate(groups):  # each group reads back as its own tensor
            assert o.get_tensor(i).shape == torch.Size(s) and o.get_tensor(i).dtype == d
        o.ref_count_down()
    # The blocking reads.
    got = b.batched_get_blocking(keys)
    assert [bytes(o.byte_array) for o in got] == want
    for o in got:
        o.ref_count_down()
    one = b.get_blocking(keys[2])
    assert bytes(one.byte_array) == want[2]
    one.ref_count_down()
    assert cpu.memory_allocator.live == 0, "an object the plugin allocated was never handed back"
    b.close()


def test_stored_value_keeps_every_group(node1, seed):
    """The value records every group's shape and dtype, and all their bytes."""
    from kvoffload.lmcache import decode_header

    b, cpu = plugin(node1)
    keys = keys_for(f"groups-{seed}", 1)
    objs, want = make_chunks(cpu, "two_groups", keys, seed)
    assert engine_put(b, keys, objs) == [True]
    g = b.client.batch_get([b._k(keys[0])])[0]
    head, payload = decode_header(memoryview(g.value))
    assert head["shapes"] == [[2, 4, 256, 128], [4, 256, 64]] and head["dtypes"] == ["bfloat16", "float32"]
    assert head["fmt"] == "KV_2LTD" and payload.nbytes == head["n"] == 2 * 4 * 256 * 128 * 2 + 4 * 256 * 64 * 4
    assert bytes(payload) == want[0]
    b.close()


def test_gaps_prefix_and_misses(node1, seed):
    b, cpu = plugin(node1)
    keys = keys_for(f"gaps-{seed}", 6)
    objs, want = make_chunks(cpu, "mha", keys, seed)
    present = [0, 1, 3, 4]
    assert engine_put(b, [keys[i] for i in present], [objs[i] for i in present]) == [True]
    for i in (2, 5):
        objs[i].ref_count_down()
    assert b.batched_contains(keys) == 2 and not b.contains(keys[2])
    assert b.batched_contains_gaps(keys) == ([(2, 3), (5, 6)], 6)
    assert b.batched_contains_gaps(keys[3:5]) == ([], 2)
    hits, pairs = engine_lookup_and_get(b, f"gaps-{seed}", keys)
    assert hits == 2 and [bytes(o.byte_array) for _, o in pairs] == want[:2]
    for _, o in pairs:
        o.ref_count_down()
    # A read past a miss returns the prefix and hands back what it read after the miss.
    got = asyncio.run(b.batched_get_non_blocking(f"gaps2-{seed}", [keys[0], keys[2], keys[3]]))
    assert len(got) == 1 and bytes(got[0].byte_array) == want[0]
    got[0].ref_count_down()
    assert b.get_blocking(keys[2]) is None and b.get_non_blocking(keys[5]).result(30) is None
    assert cpu.memory_allocator.live == 0
    b.close()


def test_cancel_request(node1, seed):
    b, cpu = plugin(node1)
    keys = keys_for(f"cancel-{seed}", 3)
    objs, want = make_chunks(cpu, "mha", keys, seed)
    assert engine_put(b, keys, objs) == [True]

    # Cancelled before its read starts: the read returns nothing and allocates nothing.
    b.cancel_request(f"gone-{seed}")
    assert asyncio.run(b.batched_get_non_blocking(f"gone-{seed}", keys)) == []
    assert cpu.memory_allocator.allocated == 3

    # Cancelled while its read runs: the objects read are handed back, [] returned.
    release, entered = threading.Event(), threading.Event()
    real_get = b.client.batch_get

    def slow_get(ks, **kw):
        entered.set()
        release.wait(30)
        return real_get(ks, **kw)

    b.client.batch_get = slow_get

    async def run():
        t = asyncio.ensure_future(b.batched_get_non_blocking(f"running-{seed}", keys))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 30)
        b.cancel_request(f"running-{seed}")
        release.set()
        return await t

    assert asyncio.run(run()) == []
    b.client.batch_get = real_get
    assert cpu.memory_allocator.live == 0, "a cancelled read kept its objects"
    # Another request is not affected.
    hits, pairs = engine_lookup_and_get(b, f"other-{seed}", keys)
    assert hits == 3 and [bytes(o.byte_array) for _, o in pairs] == want
    for _, o in pairs:
        o.ref_count_down()
    b.close()


def test_any_instance_name(node1, seed):
    """Two instances from one config, under names of their own, each with its own members
    (the node's TCP API and its local socket) and options."""
    extra = {**extra_for(",".join(node1.addrs), name="offload_tcp", pin_lease=5),
             **extra_for(node1.local_addr, name="kv_local", workers=2)}
    backends, cpu = launch(extra, plugins=["offload_tcp", "kv_local"])
    assert set(backends) == {"offload_tcp", "kv_local"}
    tcp, local = backends["offload_tcp"], backends["kv_local"]
    assert tcp.name == "offload_tcp" and tcp.client.addr == node1.addrs[0] and tcp.pin_lease == 5.0
    assert local.name == "kv_local" and local.client.addr == node1.local_addr and local._pool._max_workers == 2
    keys = keys_for(f"names-{seed}", 2)
    objs, want = make_chunks(cpu, "mha", keys, seed)
    assert engine_put(local, keys, objs) == [True]
    got = tcp.batched_get_blocking(keys)  # one store, whichever path
    assert [bytes(o.byte_array) for o in got] == want
    for o in got:
        o.ref_count_down()
    tcp.close()
    local.close()


@pytest.mark.parametrize("case", ["no addrs", "unknown option", "not listed", "unreachable"])
def test_a_wrong_setting_is_an_error_at_start_up(node1, caplog, case):
    extra = extra_for(",".join(node1.addrs), name="kvoffload")
    plugins = ["kvoffload"]
    if case == "no addrs":
        del extra["storage_plugin.kvoffload.addrs"]
        want = "storage_plugin.kvoffload.addrs is not set"
    elif case == "unknown option":
        extra["storage_plugin.kvoffload.addr"] = extra.pop("storage_plugin.kvoffload.addrs")
        want = "unknown option(s) storage_plugin.kvoffload.addr;"
    elif case == "not listed":  # a module_path that is not this module's
        extra["storage_plugin.kvoffload.module_path"] = "kvoffload.lmcache"
        extra["storage_plugin.kvoffload.class_name"] = "KVOffloadBackend"
        from kvoffload.lmcache import KVOffloadBackend

        with pytest.raises(ValueError, match="no storage_plugins entry names it"):
            KVOffloadBackend(config=SimpleNamespace(storage_plugins=["other"], extra_config=extra), dst_device="cpu")
        return
    else:
        extra["storage_plugin.kvoffload.addrs"] = "127.0.0.1:1"
        want = "no member reachable"
    with caplog.at_level(logging.ERROR):
        backends, _ = launch(extra, plugins)
    assert "kvoffload" not in backends
    assert "Failed to create backend kvoffload" in caplog.text and want in caplog.text, caplog.text


def test_chunk_over_max_object_bytes(node1, seed):
    """A chunk of more than 64 MiB (a large model's 256 tokens) is stored in parts."""
    from kvoffload.types import MAX_OBJECT_BYTES
    from lmcache.v1.memory_management import MemoryFormat

    b, cpu = plugin(node1)
    key = keys_for(f"big-{seed}", 1)
    o = cpu.allocate(torch.Size((2, 2, 256, 32800)), torch.float16, MemoryFormat.KV_2LTD)
    assert o.get_size() > MAX_OBJECT_BYTES
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, 256, (o.get_size(),), dtype=torch.uint8, generator=g)
    o.raw_data[:o.get_size()].copy_(data)
    assert engine_put(b, key, [o]) == [True]
    assert b.contains(key[0])
    got = b.get_blocking(key[0])
    assert got.get_size() == data.numel() and torch.equal(got.raw_data[:got.get_size()], data)
    got.ref_count_down()
    assert cpu.memory_allocator.live == 0
    b.close()


def test_put_callback_pin_remove(node1, seed):
    b, cpu = plugin(node1)
    keys = keys_for(f"cb-{seed}", 3)
    objs, _ = make_chunks(cpu, "mla", keys, seed)
    done = []
    futs = b.batched_submit_put_task(keys, objs, on_complete_callback=done.append)
    assert all(b.exists_in_put_tasks(k) for k in keys) or futs[0].done()
    for o in objs:
        o.ref_count_down()
    assert [f.result(30) for f in futs] == [True] and done == keys
    # Stored again: AlreadyStored is success.
    objs, _ = make_chunks(cpu, "mla", keys, seed)
    assert engine_put(b, keys, objs) == [True]
    assert b.pin(keys[0]) and b.unpin(keys[0])
    assert asyncio.run(b.batched_async_contains(f"pin-{seed}", keys, pin=True)) == 3
    assert b.remove(keys[0]) and b.batched_remove(keys[1:]) == 2 and b.batched_contains(keys) == 0
    assert b.get_allocator_backend() is cpu and b.touch_cache() is None
    assert cpu.memory_allocator.live == 0
    b.close()


def test_reads_the_earlier_value_layout(node1, seed):
    """A value stored by the previous plugin (KVO1: one shape, fmt as a number) still reads."""
    import json
    import struct

    from lmcache.v1.memory_management import MemoryFormat

    b, cpu = plugin(node1)
    key = keys_for(f"kvo1-{seed}", 1)[0]
    g = torch.Generator().manual_seed(seed)
    payload = torch.randint(0, 256, (2 * 2 * 16 * 8 * 2,), dtype=torch.uint8, generator=g).numpy().tobytes()
    head = json.dumps({"shape": [2, 2, 16, 8], "dtype": "torch.float16", "fmt": 1}).encode()
    value = b"KVO1" + struct.pack("<I", len(head)) + head + payload
    import kvoffload

    assert b.client.batch_offload(kvoffload.new_txn_id(), [(b._k(key), value)])[0].ok
    o = b.get_blocking(key)
    assert o.get_shapes() == [torch.Size((2, 2, 16, 8))] and o.get_dtypes() == [torch.float16]
    assert o.get_memory_format() == MemoryFormat.KV_2LTD and bytes(o.byte_array) == payload
    o.ref_count_down()
    b.close()


def test_many_writers(node1, seed):
    """32 threads putting shared-prefix chunks at once (the seed scenario): no failed put, every
    chunk read back byte for byte."""
    import random

    b, cpu = plugin(node1)
    rnd = random.Random(seed)
    chains = [keys_for(f"many-{seed}-{c}", 6) for c in range(4)]
    reqs = [rnd.choice(chains)[:rnd.randint(1, 6)] for _ in range(64)]
    failed = []

    def put(req):
        objs, _ = make_chunks(cpu, "mla", req, seed)
        if engine_put(b, req, objs) != [True]:
            failed.append(req)

    ts = [threading.Thread(target=lambda w=w: [put(r) for r in reqs[w::32]]) for w in range(32)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not failed
    for chain in chains:
        n = max((len(r) for r in reqs if r[0] == chain[0]), default=0)
        assert b.batched_contains(chain) >= n
    t0 = time.monotonic()
    for req in reqs[:16]:
        mine, want = make_chunks(cpu, "mla", req, seed)
        for o in mine:
            o.ref_count_down()
        got = b.batched_get_blocking(req)
        assert [bytes(o.byte_array) for o in got] == want
        for o in got:
            o.ref_count_down()
    print(f"16 reads in {time.monotonic() - t0:.2f} s")
    b.close()
    assert cpu.memory_allocator.live == 0


HOSTILE_HEADERS = {
    "parts_5e6": {"shapes": [[1]], "dtypes": ["uint8"], "fmt": "KV_2LTD", "n": 1, "parts": 5_000_000},
    "parts_1e9": {"shapes": [[1]], "dtypes": ["uint8"], "fmt": "KV_2LTD", "n": 1, "parts": 10**9},
    "parts_0": {"shapes": [[1]], "dtypes": ["uint8"], "fmt": "KV_2LTD", "n": 1, "parts": 0},
    "parts_str": {"shapes": [[1]], "dtypes": ["uint8"], "fmt": "KV_2LTD", "n": 1, "parts": "2"},
    "negative_shape": {"shapes": [[-1, -1]], "dtypes": ["uint8"], "fmt": "KV_2LTD", "n": 1, "parts": 1},
    "float_shape": {"shapes": [[0.5]], "dtypes": ["uint8"], "fmt": "KV_2LTD", "n": 1, "parts": 1},
    "huge_shape_many_parts": {"shapes": [[1 << 40]], "dtypes": ["uint8"], "fmt": "KV_2LTD", "n": 1 << 40,
                              "parts": 17},
    "unknown_dtype": {"shapes": [[1]], "dtypes": ["Tensor"], "fmt": "KV_2LTD", "n": 1, "parts": 1},
    "not_a_dict": [1, 2, 3],
}


def test_max_parts_is_what_the_writer_can_produce():
    """A chunk's parts go in one transaction: at most MAX_BATCH_BYTES cut into MAX_OBJECT_BYTES."""
    from kvoffload.lmcache import MAX_PARTS
    from kvoffload.types import MAX_BATCH_BYTES, MAX_OBJECT_BYTES

    assert MAX_PARTS == MAX_BATCH_BYTES // MAX_OBJECT_BYTES + 1


@pytest.mark.parametrize("case", list(HOSTILE_HEADERS))
def test_a_hostile_header_reads_as_a_miss(node1, seed, caplog, case):
    """A value written under a plugin key by someone else (the Python client directly) with a
    header the plugin never writes: parts above MAX_PARTS (5,000,000 once took 1.5 s and 653
    MiB building part keys; 10**9 killed the engine), shapes that are not non-negative
    integers, an unknown dtype. get_blocking is a miss at once, with a warning, nothing
    allocated and no exception."""
    import json
    import struct

    import kvoffload
    b, cpu = plugin(node1)
    key = keys_for(f"hostile-{case}-{seed}", 1)[0]
    head = json.dumps(HOSTILE_HEADERS[case]).encode()
    value = b"KVO2" + struct.pack("<I", len(head)) + head + b"\0"
    assert b.client.batch_offload(kvoffload.new_txn_id(), [(b._k(key), value)])[0].ok
    with caplog.at_level(logging.WARNING, logger="kvoffload.lmcache"):
        t0 = time.monotonic()
        assert b.get_blocking(key) is None
        assert time.monotonic() - t0 < 1.0
    assert any(r.levelno == logging.WARNING and "a miss" in r.getMessage() for r in caplog.records), caplog.text
    assert cpu.memory_allocator.live == 0
    b.close()
