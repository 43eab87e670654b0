"""A fail-stopped node (its WAL cannot be written: the wal.io.write failpoint of a
storenode built with -tags chaos) answers every call at once: the client raises
UnavailableError naming the fail-stop within REFUSAL_BOUND, over TCP and over the local
socket, and the engine backends' store jobs fail and their lookups miss as fast
(node/failstop_test.go is the Go side)."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest

import kvoffload
from conftest import _cluster
from test_backends import (FakeHostPool, chain, chunk, idx, job, lm_keys, lmcache_backend, sglang_backend, vkeys,
                           vllm_tier, wait_jobs, wait_lookup)

# The node knows its state, so the answer is immediate; the bound leaves room for a loaded
# machine, and every call runs under a 30 s timeout that a retrying client would wait out.
REFUSAL_BOUND = 1.0


@pytest.fixture(scope="module")
def failstopped(storenode_chaos_bin):
    """One node whose every WAL write fails, fail-stopped by a first offload."""
    env = dict(os.environ, KVOFFLOAD_FAILPOINTS="wal.io.write=error")
    c, base = _cluster(storenode_chaos_bin, 1, local=True, env=env)
    with kvoffload.Client(c.addrs) as cl:
        res = cl.batch_offload(kvoffload.new_txn_id(), [("first", b"x" * 4096)])
        assert res[0].outcome == kvoffload.Outcome.FAILED, res
    yield c
    c.stop()
    shutil.rmtree(base, ignore_errors=True)


def refused_at_once(fn):
    t0 = time.monotonic()
    with pytest.raises(kvoffload.UnavailableError) as e:
        fn()
    took = time.monotonic() - t0
    assert "fail-stopped" in str(e.value), e.value
    assert took < REFUSAL_BOUND, f"refused after {took:.2f} s: {e.value}"


@pytest.mark.parametrize("local", [False, True], ids=["tcp", "unix"])
def test_every_call_is_refused_at_once(failstopped, local):
    addrs = [failstopped.local_addr] if local else failstopped.addrs
    with kvoffload.Client(addrs, timeout=30) as c:
        refused_at_once(lambda: c.batch_offload(kvoffload.new_txn_id(), [("k", b"y" * 4096)]))
        refused_at_once(lambda: c.batch_get(["first", "k"]))
        refused_at_once(lambda: c.batch_get_into(["k"], [bytearray(4096)]))
        refused_at_once(lambda: c.batch_exists(["first", "k"]))
        refused_at_once(lambda: c.remove(["k"]))
        refused_at_once(lambda: c.stats())
        if local:
            with c.new_region(1 << 20) as r:
                refused_at_once(lambda: c.offload_from(kvoffload.new_txn_id(), r, [("k", 0, 4096)]))
                refused_at_once(lambda: c.get_into_region(r, [("k", 0, 4096)]))
        assert c.status().leader_id  # Status still answers: the operator's view


def test_backends_fail_fast(failstopped, seed):
    t0 = time.monotonic()
    pool = FakeHostPool(4)
    sg = sglang_backend(failstopped, f"fs-{seed}", pool)
    keys = chain(f"fs/{seed}", 2)
    assert sg.batch_exists(keys) == 0
    assert sg.batch_set_v1(keys, idx(range(2))) == [False, False]
    assert sg.batch_get_v1(keys, idx(range(2))) == [False, False]
    sg.close()
    lm = lmcache_backend(failstopped)
    lk = lm_keys(chain(f"fs-lm/{seed}", 1))
    assert lm.batched_contains(lk) == 0 and lm.get_blocking(lk[0]) is None
    assert lm.batched_submit_put_task(lk, [chunk(lk[0])])[0].result(30) is False
    lm.close()
    assert time.monotonic() - t0 < 6 * REFUSAL_BOUND, "the SGLang and LMCache calls waited"

    from vllm.v1.kv_offload.base import LookupResult

    tier, _ = vllm_tier(failstopped, namespace=f"fs{seed}")
    vk = vkeys(chain(f"fs-vl/{seed}", 1))
    t0 = time.monotonic()
    tier.submit_store(job(1, vk, np.arange(1), False))
    assert wait_jobs(tier, [1], timeout=5) == {1: False}
    # RETRY while the store is asked, then MISS: the scheduler computes the block.
    assert tier.lookup(vk[0], None) in (LookupResult.RETRY, LookupResult.MISS)
    assert wait_lookup(tier, vk[0], timeout=5) is LookupResult.MISS
    assert time.monotonic() - t0 < 2 * REFUSAL_BOUND, "the vLLM tier's job or lookup waited"
    tier.shutdown()


def test_cli_says_so_at_once(failstopped, storenode_chaos_bin):
    import subprocess

    for args in (["replay", "--addr", failstopped.addrs[0], "--requests", "2"],
                 ["status", "--addr", failstopped.addrs[0]]):
        t0 = time.monotonic()
        r = subprocess.run([storenode_chaos_bin, *args], capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
        assert r.returncode != 0, f"storenode {args[0]} exited 0 on a fail-stopped member"
        assert "fail-stopped" in r.stdout + r.stderr or "coordinator failed" in r.stdout + r.stderr, r.stdout + r.stderr
        assert took < 5 * REFUSAL_BOUND, f"storenode {args[0]} took {took:.1f} s"


def test_hostile_refusal_trailer_is_no_refusal():
    import grpc

    from kvoffload import _refusal

    class Err(grpc.RpcError):
        def __init__(self, v):
            self.v = v

        def code(self):
            return grpc.StatusCode.UNAVAILABLE

        def trailing_metadata(self):
            return [("grpc-status-details-bin", self.v)]

    def status(info_bytes):
        st = _refusal._Status()
        d = st.details.add()
        d.type_url, d.value = "type.googleapis.com/google.rpc.ErrorInfo", info_bytes
        return st.SerializeToString()

    good = _refusal._ErrorInfo(reason="FAIL_STOPPED", domain=_refusal.ERROR_DOMAIN).SerializeToString()
    assert _refusal.reason(Err(status(good))) == "FAIL_STOPPED"
    for hostile in (b"\xff" * 64, status(b"\xff\xff\xff"), status(b"\x0a\x02\xc3\x28"), "not bytes"):
        assert _refusal.reason(Err(hostile)) is None
