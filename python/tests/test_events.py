"""The key event stream's Python consumers (issue 32) against real storenode serve processes:
hint.PresenceHint (answers without BatchExists, follows removes), the vLLM tier's take_events
(exactly the keys its namespace stored and lost, evictions included) and presence_hint
lookups, and events.KVEventPublisher (vLLM KV events over ZMQ, decoded by a subscriber as a
router would: seq from 0 with no gap, the ROUTER replay for what the subscriber joined too
late for, BlockStored / BlockRemoved in commit order across a kill of the member the watcher
reads from). vLLM's format: vllm-project/vllm vllm/distributed/kv_events.py at
0181ea3173e53eea8cf04a86891488e3dc89bb34 (events.py's docstring)."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
import time

import pytest

import kvoffload
from kvoffload.hint import PresenceHint

from conftest import _cluster, free_addr, payload

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")


def counting_client(addrs):
    """A Client and the list of the operations it sent (on_attempt)."""
    calls = []
    c = kvoffload.Client(addrs, on_attempt=lambda op, *_: calls.append(op))
    return c, calls


def vkey(ns, tag, i, group=0):
    """The vLLM tier's store key of an OffloadKey (block hash + 4-byte group index)."""
    h = hashlib.sha256(f"{tag}/{i}".encode()).digest()
    return f"vllm/{ns}/" + (h + group.to_bytes(4, "big")).hex(), h


def test_presence_hint_answers_without_batch_exists_and_follows_removes(node1, seed):
    rnd = random.Random(seed)
    prefix = f"hint/{seed}/"
    c, calls = counting_client(node1.addrs)
    keys = [f"{prefix}k{i}" for i in range(rnd.randint(20, 60))]
    with PresenceHint(c, prefix=prefix, max_stale=2.0) as hint:
        assert hint.wait_synced()
        assert hint.presence(keys) == [False] * len(keys)
        for lo in range(0, len(keys), 7):
            res = c.batch_offload(kvoffload.new_txn_id(), [(k, payload(k, 256)) for k in keys[lo:lo + 7]])
            assert all(r.ok for r in res)
        assert hint.wait_synced()
        before = len(calls)
        assert hint.presence(keys) == [True] * len(keys)
        assert all(hint.present(k) for k in keys)
        assert "BatchExists" not in calls[before:], "the hint made a round trip"
        assert hint.presence(["other/key"]) is None  # outside the prefix: ask the store
        gone = set(rnd.sample(keys, len(keys) // 3))
        assert all(r.removed for r in c.remove(sorted(gone)))
        assert hint.wait_synced()
        assert hint.presence(keys) == [k not in gone for k in keys]
        assert sorted(hint.keys()) == sorted(set(keys) - gone)
        # The authority agrees.
        ex = c.batch_exists(keys).keys
        assert [p == kvoffload.Presence.PRESENT for p in ex] == [k not in gone for k in keys]
    assert hint.presence(keys) is None  # closed: no longer fresh, the caller asks BatchExists
    c.close()


def test_presence_hint_is_stale_without_a_sync(node1, seed):
    c = kvoffload.Client(node1.addrs)
    hint = PresenceHint(c, prefix=f"stale/{seed}/", max_stale=0.3, interval=5.0)
    assert hint.wait_synced()
    assert hint.present(f"stale/{seed}/x") is False
    time.sleep(0.5)  # the next round is 5 s away: the view is older than max_stale
    assert hint.present(f"stale/{seed}/x") is None
    hint.close()
    c.close()


@pytest.fixture
def small_node(storenode_bin):
    """One node with a 64 KiB quota: offloads beyond it evict the least recently used keys."""
    c, base = _cluster(storenode_bin, 1, extra=["--capacity", "65536"])
    yield c
    c.stop()
    shutil.rmtree(base, ignore_errors=True)


def test_vllm_take_events_reports_stored_and_evicted(small_node, seed):
    import test_vllm_engine as tv
    from vllm.v1.kv_offload.base import LookupResult, Medium
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    rnd = random.Random(seed)
    t = tv.torch.zeros((64, 4096), dtype=tv.torch.uint8)
    view = memoryview(t.numpy())
    entry = {"type": "KVOffloadTier", "module_path": "kvoffload.vllm", "addrs": ",".join(small_node.addrs),
             "namespace": f"ev{seed}", "presence_hint": True, "hint_max_stale": 2.0,
             "negative_ttl": 0}
    tier = SecondaryTierFactory.create_secondary_tier(entry, view, tv.spec(True))
    other = kvoffload.Client(small_node.addrs)
    # Keys of another namespace and of another engine are not this tier's.
    assert all(r.ok for r in other.batch_offload(kvoffload.new_txn_id(), [
        (f"vllm/x{seed}/" + "ab" * 36, b"x" * 4096), (f"sglang/{seed}", b"y" * 100)]))
    keys = tv.make_keys(f"ev/{seed}", 40)
    for i in range(64):
        t[i] = rnd.randrange(256)
    job, at = 1, 0
    while at < len(keys):
        n = rnd.randint(1, 6)
        ks = keys[at:at + n]
        assert tv.run_job(tier, tv.transfer(job, ks, range(at, at + len(ks)), False)).success
        job, at = job + 1, at + len(ks)
    assert tier.hint.wait_synced()
    ex = other.batch_exists([tier._k(k) for k in keys]).keys
    absent = {k for k, p in zip(keys, ex) if p != kvoffload.Presence.PRESENT}
    assert len(absent) >= len(keys) - 16, "the quota should have evicted most keys"
    # Exactly what was stored and what was evicted, each once; a key's store before its eviction.
    stored, removed, order = [], [], []
    deadline = time.monotonic() + 30
    while len(stored) < len(keys) or len(removed) < len(absent):
        assert time.monotonic() < deadline, (len(stored), len(removed), len(absent))
        for e in tier.take_events():
            assert e.medium is Medium.STORAGE
            (removed if e.removed else stored).extend(e.keys)
            order += [(k, e.removed) for k in e.keys]
        time.sleep(0.01)
    assert sorted(stored) == sorted(keys) and sorted(removed) == sorted(absent)
    assert all(order.index((k, False)) < order.index((k, True)) for k in absent)
    assert tier.hint.wait_synced() and list(tier.take_events()) == []
    # presence_hint: lookups answered from the view, no BatchExists; an evicted key is a MISS.
    calls = tier.stats()["exists_calls"]
    req = tv.ctx("r")
    for k in keys:
        assert tier.lookup(k, req) is (LookupResult.MISS if k in absent else LookupResult.HIT)
    s = tier.stats()
    assert s["exists_calls"] == calls and s["hint_answers"] >= len(absent)
    tier.shutdown()
    other.close()


def _subscriber(ctx, pub_addr, replay_addr, topic):
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
    sub.bind(pub_addr)
    return sub


def _replay(ctx, replay_addr, start):
    """vLLM's replay protocol: send the start seq, read (seq, payload) until seq -1."""
    req = ctx.socket(zmq.DEALER)
    req.connect(replay_addr)
    req.send_multipart((b"", start.to_bytes(8, "big")))
    out = []
    while True:
        assert req.poll(10_000), "no replay answer"
        _, seq, p = req.recv_multipart()
        if seq == (-1).to_bytes(8, "big", signed=True):
            break
        out.append((int.from_bytes(seq, "big"), p))
    req.close(0)
    return out


@pytest.mark.parametrize("layout", ["map", "array"])
def test_publisher_batches_match_offloads_and_removes_across_a_reconnect(cluster3, seed, layout):
    from kvoffload.events import KVEventPublisher

    rnd = random.Random(seed)
    ns, topic = f"pub{seed}", "kv-events"
    pub_addr, replay_addr = "tcp://" + free_addr(), "tcp://" + free_addr()
    ctx = zmq.Context()
    sub = _subscriber(ctx, pub_addr, replay_addr, topic)
    watcher = kvoffload.Client(cluster3.addrs)
    pub = KVEventPublisher(watcher, pub_addr, replay_endpoint=replay_addr, topic=topic, namespace=ns,
                           layout=layout, medium="STORAGE", block_size=16)
    writer = kvoffload.Client(list(reversed(cluster3.addrs)))
    txns, removes, hashes = [], [], {}
    killed = None

    def offload(n):
        batch = []
        for _ in range(n):
            k, h = vkey(ns, seed, len(hashes), group=rnd.choice([0, 0, 1]))
            hashes[k] = h
            batch.append(k)
        res = writer.batch_offload(kvoffload.new_txn_id(), [(k, payload(k, 512)) for k in batch]
                                   + [(f"other/{seed}/{len(hashes)}", b"z")])
        assert all(r.ok for r in res)
        txns.append(batch)

    for round_ in range(2):
        for _ in range(rnd.randint(4, 8)):
            offload(rnd.randint(1, 5))
        gone = rnd.sample(sorted(k for b in txns for k in b if k not in removes), 3)
        assert all(r.removed for r in writer.remove(gone))
        removes.extend(gone)
        assert pub.follower.wait_synced(30)
        if round_ == 0:  # kill the member the watcher reads from; it resumes on another
            killed = next(p for p in cluster3.procs if p.api == watcher.addr)
            cluster3.kill(killed)
    for _ in range(3):
        offload(2)
    assert pub.follower.wait_synced(60)
    assert watcher.addr != killed.api

    # What the subscriber got live, completed by the replay from 0 (it bound before the
    # publisher connected, but ZMQ's PUB drops what it sends before the connection is up).
    live = {}
    while sub.poll(200):
        t, seq, p = sub.recv_multipart()
        assert t == topic.encode()
        live[int.from_bytes(seq, "big")] = p
    got = dict(_replay(ctx, replay_addr, 0))
    assert all(got[s] == p for s, p in live.items())
    assert sorted(got) == list(range(len(got))), "seq counts batches from 0 with no gap"
    ops = []
    for s in sorted(got):
        batch = msgpack.unpackb(got[s], raw=False)
        if layout == "map":
            assert set(batch) == {"ts", "events", "data_parallel_rank"} and batch["data_parallel_rank"] == 0
            events = batch["events"]
        else:
            assert len(batch) == 3 and batch[2] == 0
            events = batch[1]
        for e in events:
            if layout == "array":
                kind = e[0]
                e = dict(zip({"BlockStored": ["block_hashes", "parent_block_hash", "token_ids", "block_size",
                                              "lora_id", "medium", "lora_name", "extra_keys", "group_idx"],
                              "BlockRemoved": ["block_hashes", "medium", "group_idx"]}.get(kind, []), e[1:]))
                e["type"] = kind
            if e["type"] == "AllBlocksCleared":
                ops.append(("cleared", None, None))
                continue
            assert e["medium"] == "STORAGE"
            if e["type"] == "BlockStored":
                assert (e["parent_block_hash"], e["token_ids"], e["block_size"]) == (None, [], 16)
            for h in e["block_hashes"]:
                ops.append((e["type"], bytes(h), e.get("group_idx")))
    # The publisher starts with a reset of an empty namespace, then the changes in commit order.
    assert ops[0] == ("cleared", None, None) and ops.count(("cleared", None, None)) == 1
    ops = ops[1:]
    by_hash = {h: k for k, h in hashes.items()}
    stored = [by_hash[h] for kind, h, _ in ops if kind == "BlockStored"]
    removed = [by_hash[h] for kind, h, _ in ops if kind == "BlockRemoved"]
    assert sorted(stored) == sorted(hashes) and len(stored) == len(set(stored)), "each offload once"
    assert sorted(removed) == sorted(removes) and len(removed) == len(set(removed))
    pos = {(kind, by_hash[h]): i for i, (kind, h, _) in enumerate(ops)}
    for b, nxt in zip(txns, txns[1:]):  # transactions in commit order
        assert max(pos[("BlockStored", k)] for k in b) < min(pos[("BlockStored", k)] for k in nxt)
    for k in removes:
        assert pos[("BlockStored", k)] < pos[("BlockRemoved", k)]
    for kind, h, g in ops:  # the group index travels with its hash
        assert g == int.from_bytes(bytes.fromhex(by_hash[h][-8:]), "big")
    assert pub.stats["skipped"] >= len(txns)  # the other/ keys
    pub.close()
    sub.close(0)
    ctx.term()
    writer.close()
    watcher.close()


def test_publisher_cli_publishes_and_prints_its_position(node1, seed):
    """python3 -m kvoffload.events: publishes what is stored (a reset and the listing) and,
    on SIGTERM, prints the position a restart resumes after (--from)."""
    ns = f"cli{seed}"
    pub_addr = "tcp://" + free_addr()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.bind(pub_addr)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, "-m", "kvoffload.events", "--addr", ",".join(node1.addrs),
                             "--zmq", pub_addr, "--namespace", ns], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)
    c = kvoffload.Client(node1.addrs)
    try:
        # ZMQ's PUB drops what it sends before its connection is up: offload a new key until
        # one is seen.
        sent, found, i = set(), False, 0
        deadline = time.monotonic() + 30
        while not found and time.monotonic() < deadline:
            k, h = vkey(ns, seed, i)
            i += 1
            assert c.batch_offload(kvoffload.new_txn_id(), [(k, b"v" * 64)])[0].ok
            sent.add(h)
            if sub.poll(500):
                _, _, p = sub.recv_multipart()
                evs = msgpack.unpackb(p)["events"]
                found = any(e["type"] == "BlockStored" and sent & set(e["block_hashes"]) for e in evs)
        assert found, "no offloaded key was published"
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
        c.close()
    assert proc.returncode == 0, err
    assert out.strip().count(".") == 1 and int(out.strip().split(".")[0]) > 0
    sub.close(0)
    ctx.term()


def test_sglang_batch_exists_from_the_hint(node1, seed):
    """presence_hint in SGLang's extra config: batch_exists answers stored pages without a
    BatchExists call, and follows a remove (a page missing a half stops the prefix)."""
    tse = pytest.importorskip("test_sglang_engine")
    gen = tse.torch.Generator().manual_seed(seed)
    pool = tse.MHAHost(8)
    tse.pool_random(pool, gen)
    extra = dict(tse.with_v1(1), presence_hint=True, hint_max_stale=2.0)
    c = tse.Controller(node1, pool, f"hint-{seed}", extra)
    b = c.backend
    calls = []
    b.client._on_attempt = lambda op, *_: calls.append(op)
    try:
        keys = tse.chain(f"hint/{seed}", 4)
        assert b.batch_set_v1(keys, tse.hidx([0, 1, 2, 3], pool.page_size)) == [True] * 4
        assert b.hint.wait_synced()
        before = len(calls)
        assert b.batch_exists(keys) == 4 and b.batch_exists(keys + tse.chain("absent", 1)) == 4
        assert "BatchExists" not in calls[before:] and b.get_stats()["hint_answers"] == 2
        assert b.client.remove([b._base(keys[2], "kv") + "_v"])[0].removed
        assert b.hint.wait_synced()
        assert b.batch_exists(keys) == 2
        assert "BatchExists" not in calls[before:]
    finally:
        c.close()


def _wait_batches(pub, n, timeout=30):
    deadline = time.monotonic() + timeout
    while pub.stats["batches"] < n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pub.stats["batches"] >= n, pub.stats


def test_publisher_binds_loopback_by_default_and_warns_on_a_wildcard(node1, seed, monkeypatch, caplog):
    """Without an endpoint the PUB socket binds tcp://127.0.0.1:5557 (this host only), not
    every interface; binding a wildcard address logs a warning."""
    import inspect
    import logging

    from kvoffload import events

    assert events.DEFAULT_ENDPOINT == "tcp://127.0.0.1:5557"
    assert inspect.signature(events.KVEventPublisher).parameters["endpoint"].default is None
    # The default endpoint's port may be taken on this machine: the same rule on a free port.
    addr = "tcp://" + free_addr()
    monkeypatch.setattr(events, "DEFAULT_ENDPOINT", addr)
    c = kvoffload.Client(node1.addrs)
    with caplog.at_level(logging.WARNING, logger="kvoffload.events"):
        pub = events.KVEventPublisher(c, namespace=f"def{seed}")
    try:
        assert pub.bound and pub.endpoint == addr
        assert pub._pub.getsockopt(zmq.LAST_ENDPOINT).decode() == addr  # bound, not connected
        assert "every interface" not in caplog.text
    finally:
        pub.close()
    wild = "tcp://*:" + free_addr().rsplit(":", 1)[1]
    with caplog.at_level(logging.WARNING, logger="kvoffload.events"):
        pub = events.KVEventPublisher(c, wild, namespace=f"def{seed}")
    try:
        assert pub.bound and "every interface" in caplog.text
    finally:
        pub.close()
        c.close()


def test_publisher_keeps_nothing_without_replay_and_caps_replay_bytes(node1, seed):
    """Without a replay socket no batch is kept; with one, at most replay_bytes of payload."""
    from kvoffload.events import KVEventPublisher

    ns = f"buf{seed}"
    c = kvoffload.Client(node1.addrs)
    ctx = zmq.Context()
    pub_addr = "tcp://" + free_addr()
    sub = _subscriber(ctx, pub_addr, None, "")
    pub = KVEventPublisher(c, pub_addr, namespace=ns, interval=0.02, max_batch=4)
    try:
        for i in range(8):
            k, _ = vkey(ns, seed, i)
            assert c.batch_offload(kvoffload.new_txn_id(), [(k, b"v" * 64)])[0].ok
        _wait_batches(pub, 3)
        assert len(pub._buffer) == 0 and pub._buffer_bytes == 0
    finally:
        pub.close()
    replay_addr = "tcp://" + free_addr()
    pub = KVEventPublisher(c, pub_addr, replay_endpoint=replay_addr, namespace=ns, replay_bytes=300,
                           interval=0.02, max_batch=1)
    try:
        _wait_batches(pub, 6)
        assert 0 < pub._buffer_bytes <= 300 and pub._buffer_bytes == sum(len(p) for _, p in pub._buffer)
        assert len(pub._buffer) < pub.stats["batches"]
        got = _replay(ctx, replay_addr, 0)
        assert got and [s for s, _ in got] == list(range(got[0][0], got[0][0] + len(got)))  # the newest kept
        assert sum(len(p) for _, p in got) <= 300
    finally:
        pub.close()
        sub.close(0)
        ctx.term()
        c.close()
