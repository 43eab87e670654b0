"""The client against real storenode serve processes (conftest.py)."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

import kvoffload
from kvoffload import Code, GetStatus, Outcome, Presence
from conftest import offload_concurrently, payload, seed_requests


@pytest.fixture(scope="module")
def client(node1):
    with kvoffload.Client(node1.addrs, timeout=20) as c:
        yield c


def test_round_trip(client, seed):
    rnd = random.Random(seed)
    objs = [(f"rt/{seed}/{i}", rnd.randbytes(rnd.choice([1, 100, 4096, (1 << 20) + 17, 3 << 20])))
            for i in range(6)]
    res = client.batch_offload(kvoffload.new_txn_id(), objs)
    assert [r.outcome for r in res] == [Outcome.STORED] * len(objs), res
    got = client.batch_get([k for k, _ in objs] + [f"rt/{seed}/missing"])
    for (k, v), g in zip(objs, got):
        assert g.status == GetStatus.FOUND and g.key == k and g.size == len(v) and g.value == v
    assert got[-1].status == GetStatus.NOT_FOUND and got[-1].code == Code.NOT_FOUND
    # Offloading again: AlreadyStored per key.
    again = client.batch_offload(kvoffload.new_txn_id(), objs[:2])
    assert [r.outcome for r in again] == [Outcome.ALREADY_STORED] * 2


def test_limits_checked_before_sending(client):
    with pytest.raises(kvoffload.InvalidArgumentError, match="zero txn ID"):
        client.batch_offload(bytes(16), [("k", b"v")])
    with pytest.raises(kvoffload.InvalidArgumentError, match="16 bytes"):
        client.batch_offload(b"short", [("k", b"v")])
    with pytest.raises(kvoffload.TooLargeError, match="MaxBatchKeys 4096"):
        client.batch_offload(kvoffload.new_txn_id(), [(f"k{i}", b"v") for i in range(4097)])
    long_key = "x" * 1025
    res = client.batch_offload(kvoffload.new_txn_id(), [("", b"v"), ("a\nb", b"v"), (long_key, b"v"),
                                                         ("limits/empty", b""), ("limits/ok", b"v")])
    assert [(r.outcome, r.code) for r in res] == [
        (Outcome.REJECTED, Code.INVALID_KEY), (Outcome.REJECTED, Code.INVALID_KEY),
        (Outcome.REJECTED, Code.INVALID_KEY), (Outcome.REJECTED, Code.INVALID_VALUE),
        (Outcome.STORED, Code.NONE)], res
    assert "limit of 1024" in res[2].reason and "not sent" in res[2].reason
    got = client.batch_get(["", "limits/ok"])
    assert got[0].status == GetStatus.INVALID_KEY and got[1].value == b"v"
    ex = client.batch_exists(["limits/ok", ""])
    assert ex.keys == [Presence.PRESENT, Presence.ABSENT] and ex.prefix_present == 1


def test_seed_scenario_32_threads(client, seed):
    """The seed's scenario: 32 writers offload requests whose keys share prefixes (chained
    block hashes); no batch fails, and every key reads back with its own bytes."""
    requests = seed_requests(seed, "seed")
    block = 64 << 10
    failures = offload_concurrently(client, requests, block)
    assert not failures, failures[:3]
    keys = sorted({k for req in requests for k in req})
    got = client.batch_get(keys)
    missing = [g.key for g in got if g.status != GetStatus.FOUND]
    wrong = [g.key for g in got if g.status == GetStatus.FOUND and g.value != payload(g.key, block)]
    assert not missing and not wrong, (missing[:5], wrong[:5])


def test_retry_same_txn_id_returns_original_results(client, seed):
    tid = kvoffload.new_txn_id()
    objs = [(f"retry/{seed}/{i}", payload(f"retry/{seed}/{i}", 1000)) for i in range(3)]
    first = client.batch_offload(tid, objs)
    assert [r.outcome for r in first] == [Outcome.STORED] * 3
    second = client.batch_offload(tid, objs)
    assert [(r.key, r.outcome) for r in second] == [(r.key, r.outcome) for r in first]
    # The same ID for a different batch is refused.
    with pytest.raises(kvoffload.InvalidArgumentError):
        client.batch_offload(tid, [(f"retry/{seed}/other", b"x")])


def test_conflict_mismatch(client, seed):
    k = f"conflict/{seed}"
    assert client.batch_offload(kvoffload.new_txn_id(), [(k, b"one")])[0].outcome == Outcome.STORED
    r = client.batch_offload(kvoffload.new_txn_id(), [(k, b"two")])[0]
    assert (r.outcome, r.code) == (Outcome.CONFLICT, Code.MISMATCH), r
    assert r.reason
    assert client.batch_get([k])[0].value == b"one"  # the stored bytes stay


def test_exists_with_lease_and_remove(client, seed):
    keys = [f"lease/{seed}/{i}" for i in range(3)]
    client.batch_offload(kvoffload.new_txn_id(), [(k, b"v" * 10) for k in keys[:2]])
    ex = client.batch_exists(keys, lease=30)
    assert ex.keys == [Presence.PRESENT, Presence.PRESENT, Presence.ABSENT] and ex.prefix_present == 2
    rm = client.remove(keys)
    assert [r.removed for r in rm] == [True, True, False]
    assert client.batch_exists(keys).prefix_present == 0
    assert [g.status for g in client.batch_get(keys)] == [GetStatus.NOT_FOUND] * 3


def test_batch_get_into(client, seed):
    rnd = random.Random(seed)
    vals = {f"into/{seed}/{i}": rnd.randbytes(n) for i, n in enumerate([10, (1 << 20) + 5, 2 << 20, 50])}
    keys = list(vals)
    client.batch_offload(kvoffload.new_txn_id(), list(vals.items()))
    ba = bytearray(100)
    big = np.zeros((2 << 20) + 64, dtype=np.uint8)
    mv = memoryview(bytearray(3 << 20))
    short = np.zeros(10, dtype=np.uint8)
    got = client.batch_get_into(keys, [ba, mv, big, short])
    assert got[0].status == GetStatus.FOUND and bytes(got[0].value) == vals[keys[0]] and ba[:10] == vals[keys[0]]
    assert bytes(got[1].value) == vals[keys[1]] and bytes(mv[: got[1].size]) == vals[keys[1]]
    assert big[: 2 << 20].tobytes() == vals[keys[2]]
    # The result's value is a view of the caller's buffer, not a copy.
    assert got[2].value.obj is big or np.shares_memory(np.asarray(got[2].value), big)
    assert got[3].status == GetStatus.SHORT_BUFFER and got[3].size == 50 and got[3].code == Code.SHORT_BUFFER
    assert not short.any()  # left as it was
    with pytest.raises(kvoffload.InvalidArgumentError, match="2 buffers for 1 keys"):
        client.batch_get_into(keys[:1], [ba, ba])
    with pytest.raises(kvoffload.InvalidArgumentError, match="read-only"):
        client.batch_get_into(keys[:1], [b"immutable"])


def test_stats_and_status(client):
    st = client.status()
    assert st.leader_id == "n1" and len(st.members) == 1
    assert "revision" in st.build and st.free_bytes > 0 and st.reserve_bytes > 0  # the answering member's facts
    s = client.stats()
    assert s.node_id == "n1" and s.keys > 0


def test_token_needs_tls(node1):
    with pytest.raises(kvoffload.InvalidArgumentError, match="plaintext"):
        kvoffload.Client(node1.addrs, token="abc")


def test_unreachable_names_what_answered(node1):
    from conftest import free_addr

    for addr, says in ((free_addr(), "nothing listens there"), (node1.procs[0].http, "an HTTP server answers there"),
                       ("no-such-host.invalid:7100", "the host does not resolve")):
        with pytest.raises(kvoffload.UnreachableError, match=says):
            kvoffload.Client([addr], dial_timeout=0.3)


def test_peer_port_is_named(node1):
    c = kvoffload.Client([node1.procs[0].peer])  # it connects: a gRPC server, without the API
    with pytest.raises(kvoffload.UnavailableError, match="serves no kvoffload API there"):
        c.stats()
    c.close()


def test_address_without_port_is_refused():
    with pytest.raises(kvoffload.InvalidArgumentError, match="not host:port"):
        kvoffload.Client(["127.0.0.1"])


def test_unreachable_and_closed(node1):
    from conftest import free_addr

    with pytest.raises(kvoffload.UnreachableError):
        kvoffload.Client([free_addr()], dial_timeout=0.3)
    c = kvoffload.Client([free_addr(), node1.addrs[0]], dial_timeout=0.3)
    assert c.addr == node1.addrs[0]
    c.close()
    with pytest.raises(kvoffload.ClosedError):
        c.batch_get(["k"])


def test_failover_after_member_killed(cluster3, seed):
    """Offloads through a three-node cluster while the member the client talks to is
    SIGKILLed: every batch is answered (failover to the next member, the same txn ID), and
    the keys stored through the survivors read back."""
    failed_attempts = []
    c = kvoffload.Client(cluster3.addrs, timeout=30,
                         on_attempt=lambda op, addr, n, secs, err: err is not None and failed_attempts.append((op, addr, n)))
    try:
        victim = next(p for p in cluster3.procs if p.api == c.addr)
        stored = {}
        for i in range(40):
            if i == 10:
                cluster3.kill(victim)
            k = f"failover/{seed}/{i}"
            v = payload(k, 32 << 10)
            res = c.batch_offload(kvoffload.new_txn_id(), [(k, v)])
            assert res[0].ok, res
            stored[k] = v
        assert c.addr != victim.api
        # The batch after the kill was retried on another member (attempt 1 failed on the victim).
        assert any(op == "BatchOffload" and addr == victim.api for op, addr, _ in failed_attempts), failed_attempts
        got = c.batch_get(list(stored)[10:])
        assert all(g.status == GetStatus.FOUND and g.value == stored[g.key] for g in got), \
            [(g.key, g.status, g.reason) for g in got if g.status != GetStatus.FOUND][:3]
        # Keys whose bytes the dead member owned are a fast per-key Unavailable, never wrong bytes.
        early = c.batch_get(list(stored)[:10])
        assert all(g.status in (GetStatus.FOUND, GetStatus.UNAVAILABLE) for g in early)
        assert all(g.value == stored[g.key] for g in early if g.status == GetStatus.FOUND)
    finally:
        c.close()
