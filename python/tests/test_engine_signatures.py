"""Pins each engine interface the backends implement: the stubs (tests/stubs, written from
the published sources listed in tests/stubs/README.md) must have exactly the recorded
methods, parameters and abstract set, and each backend must implement every one of them with
the same parameters (it may add keyword-only ones). When upstream changes, this fails: update
the stub from the new source, this table, and the backend together."""

import inspect

import pytest
from signatures import params as shape


SGLANG = {  # sgl-project/sglang python/sglang/srt/mem_cache/hicache_storage.py HiCacheStorage
    "abstract": {"batch_get", "batch_set", "exists", "get", "set"},
    "methods": {
        "register_mem_pool_host": "(mem_pool_host)",
        "batch_get_v1": "(keys, host_indices, extra_info=None)",
        "batch_set_v1": "(keys, host_indices, extra_info=None)",
        "get": "(key, target_location=None, target_sizes=None)",
        "batch_get": "(keys, target_locations=None, target_sizes=None)",
        "set": "(key, value=None, target_location=None, target_sizes=None)",
        "batch_set": "(keys, values=None, target_locations=None, target_sizes=None)",
        "exists": "(key)",
        "batch_exists": "(keys, extra_info=None)",
        "clear": "()",
        "get_stats": "()",
    },
    # backend_factory.py _create_dynamic_backend: backend_class(storage_config, kwargs)
    "init": "(storage_config=None, kwargs=None, *, client=None)",
}

LMCACHE = {  # LMCache/LMCache lmcache/v1/storage_backend/abstract_backend.py StoragePluginInterface
    "abstract": {"batched_submit_put_task", "close", "contains", "exists_in_put_tasks", "get_allocator_backend",
                 "get_blocking", "pin", "remove", "unpin"},
    "methods": {
        "contains": "(key, pin=False)",
        "exists_in_put_tasks": "(key)",
        "batched_submit_put_task": "(keys, objs, transfer_spec=None, on_complete_callback=None)",
        "async_batched_submit_put_task": "(keys, objs, transfer_spec=None, on_complete_callback=None)",
        "get_blocking": "(key)",
        "get_non_blocking": "(key, location=None)",
        "batched_async_contains": "(lookup_id, keys, pin=False)",
        "batched_get_non_blocking": "(lookup_id, keys, transfer_spec=None)",
        "batched_get_blocking": "(keys)",
        "pin": "(key)",
        "unpin": "(key)",
        "remove": "(key, force=True)",
        "batched_remove": "(keys, force=True)",
        "get_allocator_backend": "()",
        "close": "()",
        "batched_contains": "(keys, pin=False)",
        "touch_cache": "()",
        "batched_contains_gaps": "(keys, pin=False)",
        "cancel_request": "(req_id)",
    },
    # storage_plugin_launcher: cls(config=, dst_device=, metadata=, local_cpu_backend=, loop=)
    "init": "(dst_device='cuda', config=None, metadata=None, local_cpu_backend=None, loop=None)",
}

VLLM = {  # vllm-project/vllm vllm/v1/kv_offload/tiering/base.py SecondaryTierManager, current; the full
    # table (return types, drain_jobs, the previous interface) is tests/test_vllm_engine.py
    "abstract": {"drain_jobs", "get_finished_jobs", "lookup", "on_new_request", "submit_load", "submit_store"},
    "methods": {
        "lookup": "(key, req_context)",
        "submit_store": "(job_metadata)",
        "submit_load": "(job_metadata)",
        "get_finished_jobs": "()",
        "has_pending_work": "()",
        "take_events": "()",
        "touch": "(keys, req_context)",
        "on_new_request": "(req_context)",
        "on_request_finished": "(req_context)",
        "on_schedule_end": "(context)",
        "stop_executor": "()",
        "shutdown": "()",
        "get_stats": "()",
    },
    # factory.py: tier_cls(offloading_spec=, primary_kv_view=, tier_type=, **config)
    "init": "(offloading_spec, primary_kv_view, tier_type)",
}


def engines():
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
    from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface
    from vllm.v1.kv_offload.tiering.base import SecondaryTierManager
    import kvoffload.lmcache
    import kvoffload.sglang
    import kvoffload.vllm

    return [
        ("sglang", HiCacheStorage, SGLANG, kvoffload.sglang.HiCacheKVOffload, kvoffload.sglang._HiCacheKVOffload),
        ("lmcache", StoragePluginInterface, LMCACHE, kvoffload.lmcache.KVOffloadBackend, kvoffload.lmcache._KVOffloadBackend),
        ("vllm", SecondaryTierManager, VLLM, kvoffload.vllm.KVOffloadTier, kvoffload.vllm._KVOffloadTier),
    ]


@pytest.mark.parametrize("i", range(3), ids=["sglang", "lmcache", "vllm"])
def test_stub_matches_recorded_signatures(i):
    name, base, table, _, _ = engines()[i]
    assert set(base.__abstractmethods__) == table["abstract"], name
    for m, want in table["methods"].items():
        assert shape(getattr(base, m)) == want, (name, m)
    if name != "sglang":  # HiCacheStorage has no __init__ of its own
        assert shape(base.__init__) == table["init"], name


@pytest.mark.parametrize("i", range(3), ids=["sglang", "lmcache", "vllm"])
def test_backend_implements_every_method(i):
    name, base, table, cls, impl = engines()[i]
    assert issubclass(cls, base) and not getattr(cls, "__abstractmethods__", None), name
    for m, want in table["methods"].items():
        assert m in vars(impl), f"{name}: {impl.__name__} does not implement {m}"
        got = shape(getattr(impl, m))
        # The same parameters, in order, with the same defaults; keyword-only extras allowed.
        assert got == want or got.startswith(want[:-1] + ", *"), (name, m, got, want)
        assert inspect.iscoroutinefunction(getattr(impl, m)) == inspect.iscoroutinefunction(getattr(base, m)), (name, m)
    init = shape(impl.__init__)
    want = table["init"]
    if name == "vllm":  # the factory passes these three by keyword, then the tier's own options
        assert init.startswith("(offloading_spec=None, primary_kv_view=None, tier_type='kvoffload', *"), init
    else:
        assert init == want or init.startswith(want[:-1].replace("'cuda'", "'cpu'") + ", *") or \
            init.startswith(want[:-1] + ", *"), (name, init, want)


def test_importing_kvoffload_does_not_import_engines():
    import subprocess
    import sys

    code = ("import sys; sys.path[:0] = sys.argv[1:]; import kvoffload, kvoffload.sglang, kvoffload.lmcache, "
            "kvoffload.vllm; bad = [m for m in ('sglang', 'lmcache', 'vllm', 'torch') if m in sys.modules]; "
            "assert not bad, bad")
    import conftest

    subprocess.run([sys.executable, "-c", code, str(conftest.HERE.parent / "src"), str(conftest.HERE / "stubs")],
                   check=True)
