"""The client's local shared-memory path (kvoffload/local.py; docs/design.md "The local
path") against a real storenode serve with --local-socket (conftest.py node1.local_addr)."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import grpc
import numpy as np
import pytest

import kvoffload
from kvoffload import Code, GetStatus, Outcome
from kvoffload.v1 import kvoffload_pb2 as pb
from conftest import HERE, offload_concurrently, payload, seed_requests


@pytest.fixture(scope="module")
def lc(node1):
    """A client that requires the shared-memory path (local=True: a refused region raises)."""
    with kvoffload.Client([node1.local_addr], timeout=20, local=True) as c:
        yield c


@pytest.fixture(scope="module")
def tcp(node1):
    with kvoffload.Client(node1.addrs, timeout=20) as c:
        yield c


def spy(c):
    """Records the staging regions the client's local member hands out (id, size)."""
    st = c._local[0].staging
    got, orig = [], st.get

    def get(size):
        r = orig(size)
        got.append(r)
        return r

    st.get = get
    return got


def test_local_round_trip(lc, tcp, seed):
    rnd = random.Random(seed)
    objs = [(f"lrt/{seed}/{i}", rnd.randbytes(rnd.choice([1, 100, 4096, (1 << 20) + 17, 3 << 20])))
            for i in range(6)]
    regions = spy(lc)
    res = lc.batch_offload(kvoffload.new_txn_id(), objs)
    assert [r.outcome for r in res] == [Outcome.STORED] * len(objs), res
    assert regions, "the offload did not go through a staging region"
    got = lc.batch_get([k for k, _ in objs] + [f"lrt/{seed}/missing", ""])
    for (k, v), g in zip(objs, got):
        assert g.status == GetStatus.FOUND and g.key == k and g.size == len(v) and g.value == v, (k, g.status, g.reason)
    assert got[-2].status == GetStatus.NOT_FOUND and got[-2].code == Code.NOT_FOUND
    assert got[-1].status == GetStatus.INVALID_KEY
    # What went through shared memory reads back over TCP, and the other way round.
    assert [g.value for g in tcp.batch_get([k for k, _ in objs])] == [v for _, v in objs]
    k2, v2 = f"lrt/{seed}/tcp", rnd.randbytes(200_000)
    assert tcp.batch_offload(kvoffload.new_txn_id(), [(k2, v2)])[0].outcome == Outcome.STORED
    assert lc.batch_get([k2])[0].value == v2
    # AlreadyStored, Conflict and client-side rejections are per key, as on TCP.
    again = lc.batch_offload(kvoffload.new_txn_id(), objs[:2] + [(objs[2][0], b"other"), ("", b"x"), ("lrt/e", b"")])
    assert [(r.outcome, r.code) for r in again] == [
        (Outcome.ALREADY_STORED, Code.NONE), (Outcome.ALREADY_STORED, Code.NONE), (Outcome.CONFLICT, Code.MISMATCH),
        (Outcome.REJECTED, Code.INVALID_KEY), (Outcome.REJECTED, Code.INVALID_VALUE)], again
    # The same txn ID returns the original results; for another batch it is refused.
    tid = kvoffload.new_txn_id()
    first = lc.batch_offload(tid, [(f"lrt/{seed}/t", b"abc")])
    assert lc.batch_offload(tid, [(f"lrt/{seed}/t", b"abc")]) == first
    with pytest.raises(kvoffload.InvalidArgumentError):
        lc.batch_offload(tid, [(f"lrt/{seed}/t2", b"abc")])


def test_local_batch_get_into(lc, seed):
    rnd = random.Random(seed)
    vals = {f"linto/{seed}/{i}": rnd.randbytes(n) for i, n in enumerate([10, (1 << 20) + 5, 2 << 20, 50])}
    keys = list(vals)
    assert all(r.ok for r in lc.batch_offload(kvoffload.new_txn_id(), list(vals.items())))
    ba = bytearray(100)
    big = np.zeros((2 << 20) + 64, dtype=np.uint8)
    mv = memoryview(bytearray(3 << 20))
    short = np.zeros(10, dtype=np.uint8)
    got = lc.batch_get_into(keys, [ba, mv, big, short])
    assert got[0].status == GetStatus.FOUND and bytes(got[0].value) == vals[keys[0]] and ba[:10] == vals[keys[0]]
    assert bytes(got[1].value) == vals[keys[1]] and bytes(mv[: got[1].size]) == vals[keys[1]]
    assert big[: 2 << 20].tobytes() == vals[keys[2]] and not big[2 << 20:].any()
    assert np.shares_memory(np.asarray(got[2].value), big)  # a view of the caller's buffer
    assert got[3].status == GetStatus.SHORT_BUFFER and got[3].size == 50 and got[3].code == Code.SHORT_BUFFER
    assert not short.any()  # left as it was
    # batch_get without buffers reads values larger than the client's hint again, whole.
    fresh = kvoffload.Client([lc.addr], local=True)
    try:
        assert fresh._value_hint == 64 << 10
        assert [g.value for g in fresh.batch_get(keys)] == list(vals.values())
        assert fresh._value_hint == 2 << 20
    finally:
        fresh.close()


def test_local_zero_copy_region(lc, seed):
    r = lc.new_region(1 << 20)
    try:
        r.buf[0:5] = b"hello"
        r.buf[100:100 + 4096] = payload(f"zc/{seed}", 4096)
        res = lc.offload_from(kvoffload.new_txn_id(), r, [(f"zc/{seed}/a", 0, 5), (f"zc/{seed}/b", 100, 4096),
                                                         (f"zc/{seed}/e", 10, 0)])
        assert [(x.outcome, x.code) for x in res] == [(Outcome.STORED, Code.NONE), (Outcome.STORED, Code.NONE),
                                                      (Outcome.REJECTED, Code.INVALID_VALUE)], res
        got = lc.get_into_region(r, [(f"zc/{seed}/b", 8192, 8192), (f"zc/{seed}/a", 500_000, 2),
                                     (f"zc/{seed}/none", 600_000, 10)])
        assert got[0].ok and got[0].size == 4096 and bytes(r.buf[8192:8192 + 4096]) == payload(f"zc/{seed}", 4096)
        assert got[0].value.obj is r.buf.obj  # a view of the region, no copy
        assert got[1].status == GetStatus.SHORT_BUFFER and got[1].size == 5
        assert got[2].status == GetStatus.NOT_FOUND
        with pytest.raises(kvoffload.InvalidArgumentError, match="outside the region of 1048576 bytes"):
            lc.offload_from(kvoffload.new_txn_id(), r, [("zc/x", (1 << 20) - 1, 2)])
        del got
    finally:
        r.close()
    with pytest.raises(kvoffload.InvalidArgumentError, match="closed"):
        lc.get_into_region(r, [("zc/x", 0, 1)])


def test_local_region_limits_refused(lc, node1):
    # The node's MaxRegionBytes (4 GiB by default, node/local_config.go) is named in its refusal.
    with pytest.raises(kvoffload.TooLargeError, match="MaxRegionBytes 4294967296"):
        lc.new_region((4 << 30) + 1)
    with pytest.raises(kvoffload.InvalidArgumentError, match="must be positive"):
        lc.new_region(0)
    with kvoffload.Client(node1.addrs) as t:
        with pytest.raises(kvoffload.InvalidArgumentError, match="no member has a unix:// address"):
            t.new_region(4096)
    with pytest.raises(kvoffload.InvalidArgumentError, match="not a unix:// address"):
        kvoffload.Client(node1.addrs, local=True)
    # The registration still works after the refusals.
    with lc.new_region(4096) as r:
        assert r.size == 4096


_OTHER = r'''
import sys, grpc
sys.path.insert(0, sys.argv[1])
import kvoffload
from kvoffload.v1 import kvoffload_pb2 as pb, kvoffload_pb2_grpc as pbg
path, rid, tok = sys.argv[2], bytes.fromhex(sys.argv[3]), bytes.fromhex(sys.argv[4])
stub = pbg.LocalKVOffloadStub(grpc.insecure_channel("unix://" + path))
ref = pb.RegionRef(id=rid, token=tok)
for name, call in (("get", lambda: stub.Get(pb.LocalGetRequest(region=ref, keys=[pb.Desc(key="k", offset=0, length=8)]), timeout=10)),
                   ("offload", lambda: stub.Offload(pb.LocalOffloadRequest(txn_id=kvoffload.new_txn_id(), region=ref,
                                                   objects=[pb.Desc(key=sys.argv[5], offset=0, length=8)]), timeout=10))):
    try:
        call()
        print(name, "OK")
    except grpc.RpcError as e:
        print(name, e.code().name, e.details())
# Its own region works (the refusal above is about the region, not the socket).
with kvoffload.Client("unix://" + path, local=True) as c:
    print("own", c.batch_offload(kvoffload.new_txn_id(), [(sys.argv[5] + "/own", b"mine")])[0].outcome.name)
'''


def test_local_region_ref_useless_to_another_process(lc, node1, seed):
    """The node checks that a call naming a region comes from the registering process
    (SO_PEERCRED pid, node/local_region.go lookup): another process with the right ID and
    token is PermissionDenied, and our region's bytes are neither read nor stored."""
    path = node1.local_addr[len("unix://"):]
    key = f"other/{seed}"
    with lc.new_region(4096) as r:
        r.buf[:8] = b"secret!!"
        out = subprocess.run([sys.executable, "-c", _OTHER, str(HERE.parent / "src"), path, r.id.hex(), r._token.hex(), key],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        print(lines)
        assert lines[0].startswith("get PERMISSION_DENIED") and "another process" in lines[0], lines
        assert lines[1].startswith("offload PERMISSION_DENIED"), lines
        assert lines[2] == "own STORED", lines
        # Still usable by us.
        assert lc.offload_from(kvoffload.new_txn_id(), r, [(key + "/mine", 0, 8)])[0].outcome == Outcome.STORED
    assert lc.batch_get([key])[0].status == GetStatus.NOT_FOUND


def test_local_failed_call_never_reuses_its_region(lc, seed):
    """A failed Offload unregisters its staging region (the node may still be copying from
    it), and a retry after a lost reply carries the same txn ID in a new region
    (client/local.go offloadLocal)."""
    lm = lc._local[0]
    regions = spy(lc)
    tid = kvoffload.new_txn_id()
    k = f"fail/{seed}"
    assert lc.batch_offload(tid, [(k, b"one")])[0].outcome == Outcome.STORED
    # A refused call (the txn ID of another batch) is an error: its region is dropped.
    with pytest.raises(kvoffload.InvalidArgumentError):
        lc.batch_offload(tid, [(k + "/x", b"two")])
    bad = regions[-1]
    assert bad.closed and bad not in lm.staging._free
    with pytest.raises(grpc.RpcError) as e:
        lm.stub.Get(pb.LocalGetRequest(region=bad.ref(), keys=[pb.Desc(key=k, offset=0, length=8)]), timeout=10)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED  # unregistered on the node
    # A reply lost after the node stored the batch: the retry sends the same txn ID from a
    # fresh region and gets the original results.
    sent, orig = [], lm.stub.Offload

    def lossy(req, **kw):
        sent.append((bytes(req.txn_id), req.region.id))
        resp = orig(req, **kw)
        if len(sent) == 1:
            raise _FakeRpcError(grpc.StatusCode.UNAVAILABLE, "injected: the reply was lost")
        return resp

    lm.stub.Offload = lossy
    try:
        tid2 = kvoffload.new_txn_id()
        res = lc.batch_offload(tid2, [(k + "/lost", payload(k, 5000))])
    finally:
        lm.stub.Offload = orig
    assert [s[0] for s in sent] == [bytes(tid2)] * 2
    assert sent[0][1] != sent[1][1]  # the failed attempt's region was not reused
    assert res[0].outcome == Outcome.STORED, res  # the original result of the first attempt
    assert lc.batch_get([k + "/lost"])[0].value == payload(k, 5000)


class _FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        self._c, self._d = code, details

    def code(self):
        return self._c

    def details(self):
        return self._d


def test_local_falls_back_to_streaming(node1, seed):
    """local=None: no region to be had (here the registration path is wrong) streams over
    the socket's gRPC; local=True raises the registration's error instead."""
    with kvoffload.Client([node1.local_addr]) as c:
        c._local[0].staging.reg.path = "/nonexistent/local.sock"
        k = f"fallback/{seed}"
        assert c.batch_offload(kvoffload.new_txn_id(), [(k, b"streamed")])[0].outcome == Outcome.STORED
        assert c.batch_get([k])[0].value == b"streamed"
    with kvoffload.Client([node1.local_addr], local=True) as c:
        c._local[0].staging.reg.path = "/nonexistent/local.sock"
        with pytest.raises(kvoffload.UnavailableError, match="/nonexistent/local.sock"):
            c.batch_offload(kvoffload.new_txn_id(), [(k + "/2", b"x")])
        with pytest.raises(kvoffload.UnavailableError, match="/nonexistent/local.sock"):
            c.batch_get([k])


def test_local_seed_scenario_32_threads(lc, tcp, seed):
    """The seed's scenario over the local path: 32 writers offload requests whose keys share
    prefixes; no batch fails, and every key reads back with its own bytes (over both paths)."""
    requests = seed_requests(seed, "lseed")
    block = 64 << 10
    pooled = len(lc._local[0].staging._free)
    failures = offload_concurrently(lc, requests, block)
    assert not failures, failures[:3]
    keys = sorted({k for req in requests for k in req})
    for c in (lc, tcp):
        got = c.batch_get(keys)
        missing = [g.key for g in got if g.status != GetStatus.FOUND]
        wrong = [g.key for g in got if g.status == GetStatus.FOUND and g.value != payload(g.key, block)]
        assert not missing and not wrong, (c.addr, missing[:5], wrong[:5])
    # The pool grew by at most one region per concurrent call (32), and every call went
    # through it (local=True raises when a region is refused).
    assert 1 <= len(lc._local[0].staging._free) <= pooled + 32


def test_local_sglang_backend(node1, seed):
    """The SGLang backend configured with a unix:// address uses the local path."""
    from test_backends import PAGE, ROW, FakeHostPool, chain, idx, sglang_backend

    src, dst = FakeHostPool(4), FakeHostPool(4)
    b = sglang_backend(node1, f"org/lmodel-{seed}", src, addrs=node1.local_addr)
    try:
        assert b.client._local[0] is not None
        regions = spy(b.client)
        keys = chain(f"lsg/{seed}", 4)
        for s, k in enumerate(keys):
            src.fill(s, k)
        assert b.batch_set_v1(keys, idx(range(4))) == [True] * 4
        b.register_mem_pool_host(dst)
        assert b.batch_get_v1(keys, idx([0, 1, 2, 3])) == [True] * 4
        assert all(dst.check(i, k) for i, k in enumerate(keys))
        assert len(regions) == 2  # the set and the get each went through a staging region
    finally:
        b.close()


def test_local_node_restart(storenode_bin, seed):
    """A node restarted under a client drops its regions: the client's next calls find their
    staging regions lost, register new ones on a new registration connection, and go on
    (client/local.go retryLost); a caller's own region is registered again, the same memory
    under a new ID, and both directions go on through it (Region.renew)."""
    from conftest import _cluster
    import shutil

    cl, base = _cluster(storenode_bin, 1, local=True)
    try:
        errs = []
        with kvoffload.Client([cl.local_addr], timeout=30, local=True,
                              on_attempt=lambda op, addr, n, secs, err: err is not None and errs.append((op, err))) as c:
            regions = spy(c)
            k = f"restart/{seed}"
            assert c.batch_offload(kvoffload.new_txn_id(), [(k + "/0", payload(k, 9000))])[0].outcome == Outcome.STORED
            own = c.new_region(16384)
            own.buf[0:5000] = payload(k + "/own", 5000)
            old_id = own.id
            p = cl.procs[0]
            cl.kill(p)
            cl.start(p)
            cl.wait_ready(p, 30)
            before = len(regions)
            res = c.batch_offload(kvoffload.new_txn_id(), [(k + "/1", payload(k, 7000))])
            assert res[0].outcome == Outcome.STORED, res
            assert [op for op, e in errs if "staging region lost" in str(e)] == ["BatchOffload"], errs
            assert len(regions) > before and regions[-1]._gen != regions[0]._gen  # a new connection's region
            got = c.batch_get([k + "/0", k + "/1"])
            assert [g.value for g in got] == [payload(k, 9000), payload(k, 7000)]
            got = c.get_into_region(own, [(k + "/0", 5000, 9000)])
            assert got[0].ok and bytes(own.buf[5000:14000]) == payload(k, 9000), got
            assert own.id != old_id  # registered again
            res = c.offload_from(kvoffload.new_txn_id(), own, [(k + "/own", 0, 5000)])
            assert res[0].outcome == Outcome.STORED, res
            assert c.batch_get([k + "/own"])[0].value == payload(k + "/own", 5000)
            del got
            own.close()
    finally:
        cl.stop()
        shutil.rmtree(base, ignore_errors=True)
