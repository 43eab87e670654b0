"""kvoffload.vllm driven as vLLM's TieringOffloadingManager drives a secondary tier, against a
real storenode serve.

What was read (kvoffload/vllm.py's docstring has the detail), vllm-project/vllm through the
public file index: vllm/v1/kv_offload/tiering/base.py, current (the newest stored text, no
commit named by the index; TransferJob / chunk_ids, LookupResult, on_new_request and
drain_jobs abstract) and the revision example/manager.py@033af9c591f87ade2e713f2c6643361057e6a105
is written against (JobMetadata / block_ids); tiering/factory.py, current (offloading_spec=,
out-of-tree "module_path"); vllm/v1/kv_offload/base.py, current (LookupResult, Medium,
Locality, OffloadingEvent, RequestOffloadingContext, ScheduleEndContext); the previous
interface, tiering/base.py@041410b9b13a5e762e6bfce4a0ce39574def5919 with
tiering/factory.py@0411f953de014cc29c91aa7060d66f603bde6a54 (vllm_config=); and
tiering/manager.py's use of a tier's answers (HIT promotes, RETRY waits, anything else misses).

vLLM is not installable here (no PyPI, no GPU), so these tests ran against the recorded
tables below and the stubs in tests/stubs/vllm (current) and
tests/stubs/vllm/_legacy_041410b (previous), written from those texts; torch and numpy are
real. A table is the upstream method set of SecondaryTierManager: name, parameters with
defaults, return annotation, and which methods are abstract; the stub must equal it and the
tier must implement every method with the same parameters (keyword-only extras allowed).

The scenario tests make the tier through the factory from a documented secondary_tiers
entry, over a primary view shaped as vLLM's CPU primary tier has it ((num_blocks,
row_stride_bytes), here a torch uint8 tensor whose rows hold bf16 KV blocks [layers, 2,
block tokens, heads, head dim]), and call it as the manager does: lookup until it is not
RETRY (on_schedule_end and get_finished_jobs each step), a store job (cascade), a load job
(promotion) into zeroed rows, take_events, the request hooks; every byte compared.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import random
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from signatures import params

torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
LEGACY = str(HERE / "stubs" / "vllm" / "_legacy_041410b")

# -- the recorded tables -----------------------------------------------------------------------

# SecondaryTierManager, current: name: (parameters without self, return annotation)
CURRENT = {
    "lookup": ("(key, req_context)", "LookupResult"),
    "submit_store": ("(job_metadata)", "None"),
    "submit_load": ("(job_metadata)", "None"),
    "get_finished_jobs": ("()", "Iterable[JobResult]"),
    "has_pending_work": ("()", "bool"),
    "take_events": ("()", "Iterable[OffloadingEvent]"),
    "touch": ("(keys, req_context)", ""),
    "on_new_request": ("(req_context)", "RequestOffloadingContext"),
    "on_request_finished": ("(req_context)", "None"),
    "bind_parent": ("(parent)", "None"),
    "stop_executor": ("()", "None"),
    "on_schedule_end": ("(context)", "None"),
    "drain_jobs": ("()", "None"),
    "shutdown": ("()", "None"),
    "build_metric_definitions": ("(extra_config)", "dict[str, OffloadingMetricMetadata]"),
    "get_stats": ("()", "OffloadingConnectorStats | None"),
}
CURRENT_ABSTRACT = {"lookup", "submit_store", "submit_load", "get_finished_jobs", "on_new_request", "drain_jobs"}
# What the tier leaves to vLLM's default on purpose: it calls nothing back in the manager.
CURRENT_INHERITED = {"bind_parent", "build_metric_definitions"}
INIT = "(offloading_spec, primary_kv_view, tier_type)"
CURRENT_FACTORY = "(tier_config, primary_kv_view, offloading_spec)"
CURRENT_JOB = ["job_id", "keys", "chunk_ids", "is_promotion", "req_context"]
CURRENT_RESULT = ["job_id", "success", "successful_keys", "transfer_time"]
LOOKUP_RESULTS = ["MISS", "HIT", "HIT_PENDING", "RETRY"]

# SecondaryTierManager@041410b9 and SecondaryTierFactory@0411f953, the previous interface.
LEGACY_TABLE = {
    "lookup": ("(key, req_context)", "bool | None"),
    "submit_store": ("(job_metadata)", "None"),
    "submit_load": ("(job_metadata)", "None"),
    "get_finished": ("()", "Iterable[JobResult]"),
    "touch": ("(keys, req_context)", ""),
    "get_request_offloading_context": ("(req_context)", "RequestOffloadingContext"),
    "request_finished": ("(req_context)", "None"),
    "shutdown": ("()", "None"),
}
LEGACY_ABSTRACT = {"lookup", "submit_store", "submit_load", "get_finished"}
LEGACY_FACTORY = "(tier_config, primary_kv_view, vllm_config)"
LEGACY_JOB = ["job_id", "keys", "block_ids", "is_promotion", "req_context"]


def returns(f) -> str:
    r = inspect.signature(f).return_annotation
    return "" if r is inspect.Signature.empty else (r if isinstance(r, str) else repr(r)).strip("'\"")


def compatible(got: str, want: str, defaults_ok: bool = False) -> bool:
    """The same parameters in order (with the same defaults unless defaults_ok); keyword-only
    extras allowed."""
    if defaults_ok:
        got = "(" + ", ".join(p.split("=")[0] for p in got[1:-1].split(", ")) + ")" if got != "()" else got
    return got == want or got.startswith(want[:-1] + (", *" if want != "()" else "*"))


def fields(cls):
    import dataclasses

    return [f.name for f in dataclasses.fields(cls)]


@contextlib.contextmanager
def legacy_vllm():
    """The previous interface's stubs in place of the current ones, for the duration."""
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "vllm" or k.startswith("vllm.")}
    sys.path.insert(0, LEGACY)
    importlib.invalidate_caches()
    try:
        import vllm

        assert vllm.__file__.startswith(LEGACY), vllm.__file__
        yield
    finally:
        sys.path.remove(LEGACY)
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[k]
        sys.modules.update(saved)
        importlib.invalidate_caches()


def test_stub_is_the_recorded_table():
    import vllm
    from vllm.v1.kv_offload import base as kb
    from vllm.v1.kv_offload.tiering import base as tb
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    print(f"ran against the recorded tables and the stubs at {Path(vllm.__file__).parent} (vLLM is not installed here)")
    S = tb.SecondaryTierManager
    assert set(S.__abstractmethods__) == CURRENT_ABSTRACT
    assert {n for n, v in vars(S).items() if not n.startswith("_") and callable(getattr(S, n))} == set(CURRENT)
    for m, (ps, ret) in CURRENT.items():
        assert (params(getattr(S, m)), returns(getattr(S, m))) == (ps, ret), m
    assert params(S.__init__) == INIT and params(SecondaryTierFactory.create_secondary_tier) == CURRENT_FACTORY
    assert fields(tb.TransferJob) == CURRENT_JOB and fields(tb.JobResult) == CURRENT_RESULT
    assert [r.name for r in kb.LookupResult] == LOOKUP_RESULTS
    assert fields(kb.OffloadingEvent) == ["keys", "medium", "removed", "locality"]


def test_tier_implements_the_recorded_table():
    import kvoffload.vllm as kv
    from vllm.v1.kv_offload.tiering.base import SecondaryTierManager

    cls = kv.KVOffloadTier
    assert issubclass(cls, SecondaryTierManager) and not cls.__abstractmethods__
    for m, (ps, ret) in CURRENT.items():
        if m in CURRENT_INHERITED:
            continue
        assert m in vars(kv._KVOffloadTier), f"KVOffloadTier leaves {m} to vLLM's default"
        f = getattr(kv._KVOffloadTier, m)
        assert compatible(params(f), ps), (m, params(f), ps)
        assert returns(f) == ret, (m, returns(f), ret)
    # The factory passes all three by keyword (and vllm_config= in the previous revision).
    assert compatible(params(kv._KVOffloadTier.__init__), INIT, defaults_ok=True), params(kv._KVOffloadTier.__init__)
    assert "vllm_config" in inspect.signature(kv._KVOffloadTier.__init__).parameters


def test_previous_interface_table():
    with legacy_vllm():
        import kvoffload.vllm as kv
        from vllm.v1.kv_offload.tiering import base as tb
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

        S = tb.SecondaryTierManager
        assert set(S.__abstractmethods__) == LEGACY_ABSTRACT
        for m, (ps, ret) in LEGACY_TABLE.items():
            assert (params(getattr(S, m)), returns(getattr(S, m))) == (ps, ret), m
        assert params(SecondaryTierFactory.create_secondary_tier) == LEGACY_FACTORY
        assert fields(tb.JobMetadata) == LEGACY_JOB
        cls = kv.KVOffloadTier
        assert issubclass(cls, S) and not cls.__abstractmethods__
        for m, (ps, _) in LEGACY_TABLE.items():
            assert m in vars(kv._KVOffloadTier), m
            assert compatible(params(getattr(kv._KVOffloadTier, m)), ps), m
        # lookup's annotation is the current one; under this interface it answers True / False / None.


# -- the engine's side ---------------------------------------------------------------------------

LAYERS, TOKENS, HEADS, HEAD_DIM = 4, 16, 4, 64  # one block: bf16 [layers, 2, tokens, heads, head dim]
BLOCK = LAYERS * 2 * TOKENS * HEADS * HEAD_DIM * 2


def primary(blocks):
    """The CPU primary tier's memory as TieringOffloadingSpec hands it to a secondary tier:
    a view of shape (num_blocks, row_stride_bytes); the torch tensor behind it."""
    t = torch.zeros((blocks, BLOCK), dtype=torch.uint8)
    return t, memoryview(t.numpy())


def fill(t, block, key, seed):
    """Block `block` of the primary tensor as a bf16 KV block drawn from the seed and key."""
    g = torch.Generator().manual_seed(seed ^ int.from_bytes(bytes(key)[:7], "big"))
    kv = torch.randn((LAYERS, 2, TOKENS, HEADS, HEAD_DIM), generator=g).to(torch.bfloat16)
    t[block].copy_(kv.view(-1).view(torch.uint8))
    return t[block].numpy().tobytes()


def make_keys(tag, n, group=0):
    """vLLM's OffloadKeys of n chained block hashes."""
    import hashlib

    from vllm.v1.kv_offload.base import make_offload_key

    keys, prev = [], tag.encode()
    for _ in range(n):
        prev = hashlib.sha256(prev).digest()
        keys.append(make_offload_key(prev, group))
    return keys


def spec(events=True):
    from vllm.v1.kv_offload.base import OffloadingKVEventsConfig, OffloadingSpec

    return OffloadingSpec(SimpleNamespace(model="m"), {}, OffloadingKVEventsConfig(events, False))


def make_tier(node, view, form="out_of_tree", events=True, **opts):
    """One documented secondary_tiers entry through SecondaryTierFactory: the out-of-tree form
    ({"type": "KVOffloadTier", "module_path": "kvoffload.vllm"}) or the registered type
    ("kvoffload", registered by the vllm.general_plugins entry point)."""
    import kvoffload.vllm
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    entry = {"addrs": ",".join(node.addrs), **opts}
    if form == "out_of_tree":
        entry.update(type="KVOffloadTier", module_path="kvoffload.vllm")
    else:
        kvoffload.vllm.register()
        entry.update(type="kvoffload")
    return SecondaryTierFactory.create_secondary_tier(entry, view, spec(events))


def ctx(rid):
    from vllm.v1.kv_offload.base import ReqContext

    return ReqContext(req_id=rid)


def step(tier):
    """The end of one scheduler step, as the manager calls the tier."""
    from vllm.v1.kv_offload.base import ScheduleEndContext

    tier.on_schedule_end(ScheduleEndContext(new_req_ids=(), preempted_req_ids=()))
    return list(tier.get_finished_jobs())


def lookup(tier, key, req, timeout=10):
    """The manager's lookup of one key: asked again each step while the tier says RETRY;
    (answer, steps)."""
    from vllm.v1.kv_offload.base import LookupResult

    deadline, steps = time.monotonic() + timeout, 0
    while (r := tier.lookup(key, req)) is LookupResult.RETRY:
        assert time.monotonic() < deadline, "lookup stayed RETRY"
        step(tier)
        steps += 1
        time.sleep(0.002)
    return r, steps


def run_job(tier, job, timeout=60):
    """Submit, then poll get_finished_jobs each step until the job's result arrives."""
    t0 = time.monotonic()
    (tier.submit_store if not job.is_promotion else tier.submit_load)(job)
    assert time.monotonic() - t0 < 0.05, "a submit must not block the scheduler"
    deadline = time.monotonic() + timeout
    while True:
        got = [r for r in step(tier) if r.job_id == job.job_id]
        if got:
            return got[0]
        assert time.monotonic() < deadline, f"job {job.job_id} not finished"
        time.sleep(0.002)


def take_events(tier, n, timeout=30):
    """take_events each step until events naming n keys have come (the tier's watcher reads
    the key event stream beside the scheduler)."""
    out, deadline = [], time.monotonic() + timeout
    while sum(len(e.keys) for e in out) < n:
        assert time.monotonic() < deadline, f"{sum(len(e.keys) for e in out)} of {n} keys in events: {out}"
        out += list(tier.take_events())
        time.sleep(0.01)
    return out


def transfer(job_id, keys, rows, promotion, rid="r"):
    from vllm.v1.kv_offload.tiering.base import TransferJob

    return TransferJob(job_id, keys, np.asarray(rows, dtype=np.int64), promotion, ctx(rid))


@pytest.mark.parametrize("form", ["out_of_tree", "registered"])
def test_lookup_store_load_events(node1, seed, form):
    from vllm.v1.kv_offload.base import Locality, LookupResult, Medium, OffloadPolicy

    t, view = primary(16)
    tier = make_tier(node1, view, form, namespace=f"{form}{seed}")
    assert tier.tier_type == ("KVOffloadTier" if form == "out_of_tree" else "kvoffload")
    assert tier.medium is Medium.STORAGE and tier.locality is Locality.REMOTE
    req = ctx(f"req-{seed}")
    assert tier.on_new_request(req).policy is OffloadPolicy.BLOCK_LEVEL
    keys = make_keys(f"{form}/{seed}", 4)
    want = [fill(t, i, k, seed) for i, k in enumerate(keys)]
    # Unknown keys: RETRY while the store is asked, then MISS.
    assert tier.lookup(keys[0], req) is LookupResult.RETRY
    assert lookup(tier, keys[0], req)[0] is LookupResult.MISS
    # A cascade (store job).
    r = run_job(tier, transfer(1, keys, range(4), False))
    assert (r.job_id, r.success) == (1, True) and r.transfer_time is not None
    assert all(lookup(tier, k, req)[0] is LookupResult.HIT for k in keys)
    ev = take_events(tier, len(keys))  # the key event stream reports the stored keys, once each
    assert sorted(k for e in ev for k in e.keys) == sorted(keys)
    assert {(e.medium, e.removed, e.locality) for e in ev} == {(Medium.STORAGE, False, Locality.REMOTE)}
    assert tier.hint.wait_synced() and list(tier.take_events()) == []
    # A promotion (load job) into zeroed rows.
    t[8:12] = 0
    r = run_job(tier, transfer(2, keys, range(8, 12), True))
    assert (r.success, r.successful_keys) == (True, None)
    assert [t[8 + i].numpy().tobytes() for i in range(4)] == want
    assert not tier.has_pending_work()
    tier.on_request_finished(req)
    s = tier.stats()
    assert s["stored_keys"] == 4 and s["loaded_keys"] == 4 and s["store_jobs"] == s["load_jobs"] == 1
    tier.shutdown()


def test_a_fresh_tier_finds_what_another_stored(node1, seed):
    """Another scheduler (another vLLM instance) sees the blocks one stored: lookups go to the
    store, not to this tier's memory."""
    from vllm.v1.kv_offload.base import LookupResult

    t, view = primary(8)
    a = make_tier(node1, view, namespace=f"share{seed}")
    keys = make_keys(f"share/{seed}", 3)
    want = [fill(t, i, k, seed) for i, k in enumerate(keys)]
    assert run_job(a, transfer(1, keys, range(3), False)).success
    a.shutdown()
    t2, view2 = primary(8)
    b = make_tier(node1, view2, namespace=f"share{seed}")
    req = ctx("r2")
    answers = [lookup(b, k, req) for k in keys]
    assert all(r is LookupResult.HIT for r, _ in answers)
    assert b.stats()["exists_calls"] <= 3
    assert run_job(b, transfer(7, keys, [5, 6, 7], True)).success
    assert [t2[i].numpy().tobytes() for i in (5, 6, 7)] == want
    b.shutdown()


def test_partial_load_and_job_types(node1, seed):
    """A load of which some keys are gone reports the loaded ones; a job of the revision before
    (JobMetadata, block_ids) works as well."""
    from vllm.v1.kv_offload.base import LookupResult

    t, view = primary(8)
    tier = make_tier(node1, view, namespace=f"partial{seed}")
    keys = make_keys(f"partial/{seed}", 3)
    want = [fill(t, i, k, seed) for i, k in enumerate(keys)]
    old_job = SimpleNamespace(job_id=1, keys=keys[:2], block_ids=np.arange(2), is_promotion=False, req_context=ctx("r"))
    assert run_job(tier, old_job).success
    t[4:7] = 0
    r = run_job(tier, transfer(2, keys, [4, 5, 6], True))
    assert r.success is False and list(r.successful_keys) == keys[:2]
    assert [t[4].numpy().tobytes(), t[5].numpy().tobytes()] == want[:2]
    assert lookup(tier, keys[2], ctx("r"))[0] is LookupResult.MISS
    tier.shutdown()


def test_lookups_are_batched_and_dropped_with_their_request(node1, seed):
    """Lookups queued while the store answers go out as one BatchExists; a finished request's
    queued lookups are not sent."""
    from vllm.v1.kv_offload.base import LookupResult

    t, view = primary(4)
    tier = make_tier(node1, view, namespace=f"batch{seed}")
    keys = make_keys(f"batch/{seed}", 101)
    entered, release = threading.Event(), threading.Event()
    real, sizes = tier.client.batch_exists, []

    def slow(ks, *a, **kw):
        sizes.append(len(ks))
        entered.set()
        release.wait(30)
        return real(ks, *a, **kw)

    tier.client.batch_exists = slow
    a, b = ctx("a"), ctx("b")
    assert tier.lookup(keys[0], a) is LookupResult.RETRY
    assert entered.wait(10)
    for k in keys[1:51]:
        assert tier.lookup(k, a) is LookupResult.RETRY
    for k in keys[51:]:
        assert tier.lookup(k, b) is LookupResult.RETRY
    assert tier.has_pending_work()
    tier.on_request_finished(b)  # its 50 lookups are not sent
    release.set()
    assert all(lookup(tier, k, a)[0] is LookupResult.MISS for k in keys[:51])
    assert sizes == [1, 50], sizes
    tier.client.batch_exists = real
    tier.shutdown()


def test_negative_answers_expire(node1, seed):
    from vllm.v1.kv_offload.base import LookupResult

    t, view = primary(4)
    tier = make_tier(node1, view, namespace=f"ttl{seed}", negative_ttl=0.2)
    other = make_tier(node1, view, namespace=f"ttl{seed}")
    key = make_keys(f"ttl/{seed}", 1)
    fill(t, 0, key[0], seed)
    assert lookup(tier, key[0], ctx("r"))[0] is LookupResult.MISS
    assert run_job(other, transfer(1, key, [0], False)).success
    assert tier.lookup(key[0], ctx("r")) is LookupResult.MISS  # remembered for negative_ttl
    time.sleep(0.25)
    assert lookup(tier, key[0], ctx("r"))[0] is LookupResult.HIT
    tier.shutdown()
    other.shutdown()


def test_events_follow_vllms_setting(node1, seed):
    t, view = primary(4)
    tier = make_tier(node1, view, events=False, namespace=f"noev{seed}")
    keys = make_keys(f"noev/{seed}", 2)
    for i, k in enumerate(keys):
        fill(t, i, k, seed)
    assert run_job(tier, transfer(1, keys, [0, 1], False)).success
    assert list(tier.take_events()) == []
    tier.shutdown()


def test_drain_and_local_socket(node1, seed):
    """drain_jobs waits for every job; over the node's local socket the tier is LOCAL."""
    from vllm.v1.kv_offload.base import Locality
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    t, view = primary(32)
    tier = SecondaryTierFactory.create_secondary_tier(
        {"type": "KVOffloadTier", "module_path": "kvoffload.vllm", "addrs": node1.local_addr,
         "namespace": f"drain{seed}"}, view, spec())
    assert tier.locality is Locality.LOCAL
    keys = make_keys(f"drain/{seed}", 32)
    want = [fill(t, i, k, seed) for i, k in enumerate(keys)]
    for j in range(4):
        tier.submit_store(transfer(j, keys[j * 8:(j + 1) * 8], range(j * 8, (j + 1) * 8), False))
    tier.drain_jobs()
    assert sorted((r.job_id, r.success) for r in tier.get_finished_jobs()) == [(j, True) for j in range(4)]
    t.zero_()
    tier.submit_load(transfer(9, keys, range(32), True))
    tier.drain_jobs()
    assert [r.success for r in tier.get_finished_jobs()] == [True]
    assert [t[i].numpy().tobytes() for i in range(32)] == want
    tier.shutdown()


@pytest.mark.parametrize("case", ["no addrs", "unknown option", "flat view", "block too large", "unreachable"])
def test_a_wrong_entry_fails_start_up(node1, case):
    from kvoffload.types import MAX_OBJECT_BYTES
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    t, view = primary(2)
    entry = {"type": "KVOffloadTier", "module_path": "kvoffload.vllm", "addrs": ",".join(node1.addrs)}
    if case == "no addrs":
        del entry["addrs"]
        want = '"addrs" is not set'
    elif case == "unknown option":
        entry["adrs"] = entry.pop("addrs")
        want = "unknown option(s) adrs"
    elif case == "flat view":
        view = memoryview(bytearray(BLOCK * 2))
        want = "C-contiguous 2-D memoryview"
    elif case == "block too large":
        view = memoryview(bytearray(MAX_OBJECT_BYTES + 1)).cast("B", (1, MAX_OBJECT_BYTES + 1))
        want = "MaxObjectBytes"
    else:
        entry["addrs"] = "127.0.0.1:1"
        want = "no member reachable"
    with pytest.raises(Exception, match=want.replace("(", r"\(").replace(")", r"\)")):
        SecondaryTierFactory.create_secondary_tier(entry, view, spec())


def test_previous_interface_end_to_end(node1, seed):
    """vLLM's previous tier interface and factory (vllm_config=, True / False / None,
    get_finished, request_finished) with the registered type."""
    with legacy_vllm():
        import kvoffload.vllm
        from vllm.v1.kv_offload.base import ReqContext
        from vllm.v1.kv_offload.tiering.base import JobMetadata
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

        kvoffload.vllm.register()
        t, view = primary(8)
        vllm_config = SimpleNamespace(model="m")
        tier = SecondaryTierFactory.create_secondary_tier(
            {"type": "kvoffload", "addrs": ",".join(node1.addrs), "namespace": f"legacy{seed}"}, view, vllm_config)
        assert tier.vllm_config is vllm_config
        req = ReqContext("r")
        keys = make_keys(f"legacy/{seed}", 3)
        want = [fill(t, i, k, seed) for i, k in enumerate(keys)]
        assert tier.lookup(keys[0], req) is None

        def answer(k):
            deadline = time.monotonic() + 10
            while (r := tier.lookup(k, req)) is None:
                assert time.monotonic() < deadline
                time.sleep(0.002)
            return r

        assert answer(keys[0]) is False
        tier.submit_store(JobMetadata(1, keys, np.arange(3), False, req))

        def finished(job_id):
            deadline = time.monotonic() + 30
            while True:
                for r in tier.get_finished():
                    if r.job_id == job_id:
                        return r
                assert time.monotonic() < deadline
                time.sleep(0.002)

        assert finished(1).success and all(answer(k) is True for k in keys)
        t.zero_()
        tier.submit_load(JobMetadata(2, keys, np.array([5, 6, 7]), True, req))
        assert finished(2).success and [t[i].numpy().tobytes() for i in (5, 6, 7)] == want
        tier.get_request_offloading_context(req)
        tier.request_finished(req)
        tier.shutdown()


def test_many_jobs_at_once(node1, seed):
    """96 shared-prefix requests' store jobs from 32 threads (the seed scenario), then their
    loads: every job succeeds, every byte comes back."""
    from test_backends import shared_prefix_requests

    from vllm.v1.kv_offload.base import make_offload_key

    rnd = random.Random(seed)
    reqs = [[make_offload_key(bytes.fromhex(h), 0) for h in r] for r in shared_prefix_requests(rnd, f"vmany/{seed}", 96)]
    t, view = primary(96 * 10)
    tier = make_tier(node1, view, namespace=f"many{seed}")
    want = {}
    for j, keys in enumerate(reqs):
        for i, k in enumerate(keys):
            want[(j, i)] = fill(t, j * 10 + i, k, seed)
    errs = []

    def store(w):
        try:
            for j in range(w, len(reqs), 32):
                tier.submit_store(transfer(j, reqs[j], range(j * 10, j * 10 + len(reqs[j])), False))
        except BaseException as e:  # noqa: BLE001
            errs.append(e)

    ts = [threading.Thread(target=store, args=(w,)) for w in range(32)]
    [x.start() for x in ts]
    [x.join() for x in ts]
    assert not errs
    tier.drain_jobs()
    assert all(r.success for r in tier.get_finished_jobs())
    t.zero_()
    for j, keys in enumerate(reqs):
        tier.submit_load(transfer(1000 + j, keys, range(j * 10, j * 10 + len(keys)), True))
    tier.drain_jobs()
    res = list(tier.get_finished_jobs())
    assert len(res) == len(reqs) and all(r.success for r in res)
    assert all(t[j * 10 + i].numpy().tobytes() == w for (j, i), w in want.items())
    tier.shutdown()
