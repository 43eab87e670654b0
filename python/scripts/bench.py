#!/usr/bin/python3
"""The Python client's offload and BatchGet throughput as a ratio to the Go client's, in the
same run, against the same local storenode serve (python/README.md "Throughput").

Both sides run the same workload: storenode replay's (workload/replay/replay.go) over the
shipped Mooncake trace sample (workload/trace/conversation_sample.jsonl), the first
--requests requests, --writers concurrent writers, one batch offload per request, one key
per block (trace.Key's format), --block-size bytes per block; then every distinct key is read
back in BatchGets of 64 keys, one at a time, and compared with what was written. The Go side
is `storenode replay --addr` (the Go client), the Python side this script (kvoffload.Client).
Each round runs both with fresh keys (a model name per side and round), alternating which
goes first. Offload MB/s is bytes Stored / offload seconds, read MB/s bytes read / read
seconds (10^6 bytes), as replay's summary defines them.

Differences in the workload, named: the Go payload is an AES-CTR keystream per key
(trace.Payload), the Python payload the key's SHA-256 repeated (cheaper to make; both are
made inside the timed loop).

    /usr/bin/python3 python/scripts/bench.py [--requests 60] [--rounds 2] [--writers 32]

--sides picks what is compared (the first side is the ratios' denominator): go and py over the
node's TCP API, go-local and py-local over its --local-socket (the shared-memory path,
docs/design.md "The local path"; py-local with local=True, so every call goes through a
region), py-pool over the socket from an engine-like host pool in a registered region
(offload_from / get_into_region, payloads made before the clock), and embedded
(`storenode replay` into an embedded node on a fresh directory, the Go side's own pace).
`--sides py,py-local` compares the Python client's two paths; `--sides embedded,py-pool` is
issue 29's Python-over-the-socket ratio.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent / "tests"))

import kvoffload  # noqa: E402
from conftest import Cluster  # noqa: E402  (the tests' storenode launcher)


def trace_key(model: str, hash_id: int) -> str:
    """workload/trace/trace.go Key."""
    return (model + "@pcp0@dcp0@head_or_tp_rank:0@pp_rank:0@group:0@cache_role:kv@cache_family:full@"
            + hashlib.sha256(str(hash_id).encode()).hexdigest())


def block(key: str, size: int) -> bytes:
    d = hashlib.sha256(key.encode()).digest()
    return (d * (size // 32 + 1))[:size]


def offload_all(batches, offload, writers, size):
    """Runs offload(i) for every batch index from `writers` threads, each taking the next
    index; returns the bytes Stored (size per STORED key), the errors and failed keys, and
    the seconds it took."""
    nxt, lock = [0], threading.Lock()
    stored, errors = [0], []

    def writer():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= batches:
                return
            try:
                res = offload(i)
            except kvoffload.KVOffloadError as e:
                errors.append(e)
                continue
            n = sum(r.outcome == kvoffload.Outcome.STORED for r in res)
            bad = [r for r in res if not r.ok]
            with lock:
                stored[0] += n * size
                errors.extend(bad)

    t0 = time.monotonic()
    ts = [threading.Thread(target=writer) for _ in range(writers)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return stored[0], errors, time.monotonic() - t0


def python_replay(addrs, reqs, model, writers, size, local=None):
    c = kvoffload.Client(addrs, timeout=120, local=local)

    def offload(i):
        keys = [trace_key(model, h) for h in reqs[i]]
        return c.batch_offload(kvoffload.new_txn_id(), [(k, block(k, size)) for k in keys])

    stored, errors, secs = offload_all(len(reqs), offload, writers, size)
    keys = list(dict.fromkeys(trace_key(model, h) for r in reqs for h in r))
    t0, read, missing = time.monotonic(), 0, 0
    for lo in range(0, len(keys), 64):
        for g in c.batch_get(keys[lo:lo + 64]):
            if g.ok and g.value == block(g.key, size):
                read += len(g.value)
            else:
                missing += 1
    rsecs = time.monotonic() - t0
    c.close()
    return {"mb_per_s": stored / 1e6 / secs, "read_mb_per_s": read / 1e6 / rsecs, "bytes": stored,
            "seconds": secs, "errors": len(errors), "missing": missing, "unique_keys": len(keys)}


def python_pool_replay(addrs, reqs, model, writers, size, readers=4, batch=64):
    """The py-pool side: an engine's host pool in a registered region. Every payload is made
    in the pool before the clock starts (as storenode replay makes its payloads ahead), the
    batches go as descriptors of it (offload_from), and the read-back reads into a second
    region, `readers` threads of `batch` keys at a time (storenode replay's read-back), each
    value compared with the payload it was offloaded with."""
    c = kvoffload.Client(addrs, timeout=120, local=True)
    key_lists = [[trace_key(model, h) for h in r] for r in reqs]
    pool = c.new_region(sum(len(k) for k in key_lists) * size)
    descs, slot, sent = [], 0, {}
    for keys in key_lists:
        d = []
        for k in keys:
            b = sent.setdefault(k, block(k, size))
            pool.buf[slot * size:(slot + 1) * size] = b
            d.append((k, slot * size, size))
            slot += 1
        descs.append(d)
    stored, errors, secs = offload_all(
        len(descs), lambda i: c.offload_from(kvoffload.new_txn_id(), pool, descs[i]), writers, size)
    keys = list(dict.fromkeys(k for ks in key_lists for k in ks))
    into = c.new_region(readers * batch * size)
    read, missing, nb, lock = [0], [0], [0], threading.Lock()

    def reader(w):
        base = w * batch * size
        while True:
            with lock:
                lo = nb[0] * batch
                nb[0] += 1
            if lo >= len(keys):
                return
            part = keys[lo:lo + batch]
            got = c.get_into_region(into, [(k, base + j * size, size) for j, k in enumerate(part)])
            # Each value is compared with the payload its key was offloaded with, made before
            # the clock (a memoryview compares byte by byte; as bytes it is one memcmp).
            good = sum(1 for g in got if g.ok and g.value.tobytes() == sent[g.key])
            with lock:
                read[0] += good * size
                missing[0] += len(part) - good

    t0 = time.monotonic()
    ts = [threading.Thread(target=reader, args=(w,)) for w in range(readers)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    rsecs = time.monotonic() - t0
    c.close()
    return {"mb_per_s": stored / 1e6 / secs, "read_mb_per_s": read[0] / 1e6 / rsecs, "bytes": stored,
            "seconds": secs, "errors": len(errors), "missing": missing[0], "unique_keys": len(keys)}


def embedded_replay(binary, tmp, n, model, writers, size):
    """The embedded side: storenode replay into an embedded node on a fresh directory."""
    data = tempfile.mkdtemp(prefix="embedded-", dir=tmp)
    try:
        out = subprocess.run([binary, "replay", "--data", data, "--requests", str(n), "--json", "--baseline", "0",
                              "--model", model, "--writers", str(writers), "--block-size", str(size)],
                             capture_output=True, text=True, check=True).stdout
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return json.loads(out.strip().splitlines()[-1])


def go_replay(binary, addrs, n, model, writers, size):
    out = subprocess.run([binary, "replay", "--addr", ",".join(addrs), "--requests", str(n), "--json",
                          "--model", model, "--writers", str(writers), "--block-size", str(size)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--writers", type=int, default=32)
    ap.add_argument("--block-size", type=int, default=256 << 10)
    ap.add_argument("--bin", help="a storenode binary (default: go build one)")
    ap.add_argument("--sides", default="go,py", help="comma-separated: go, py, go-local, py-local, py-pool, embedded")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kvoffload-bench-")
    binary = a.bin
    if not binary:
        binary = os.path.join(tmp, "storenode")
        subprocess.run([shutil.which("go") or "/usr/local/go/bin/go", "build", "-o", binary, "./cmd/storenode"],
                       cwd=REPO, check=True)
    reqs = [json.loads(l)["hash_ids"] for l in (REPO / "workload/trace/conversation_sample.jsonl").read_text().splitlines()[:a.requests]]
    print(f"load average before: {os.getloadavg()}; {os.cpu_count()} CPUs", flush=True)
    sides = a.sides.split(",")
    if len(sides) != 2 or not set(sides) <= {"go", "py", "go-local", "py-local", "py-pool", "embedded"}:
        ap.error("--sides: two of go, py, go-local, py-local, py-pool, embedded")
    sock = os.path.join(tmp, "local.sock")
    cluster = Cluster(binary, 1, tmp, ["--local-socket", sock])
    try:
        rows = []
        for r in range(a.rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            res = {}
            for side in order:
                model = f"bench-{side}-{r}-{os.getpid()}"
                addrs = ["unix://" + sock] if side.endswith(("-local", "-pool")) else cluster.addrs
                if side == "embedded":
                    res[side] = embedded_replay(binary, tmp, a.requests, model, a.writers, a.block_size)
                elif side == "py-pool":
                    res[side] = python_pool_replay(addrs, reqs, model, a.writers, a.block_size)
                elif side.startswith("go"):
                    res[side] = go_replay(binary, addrs, a.requests, model, a.writers, a.block_size)
                else:
                    res[side] = python_replay(addrs, reqs, model, a.writers, a.block_size,
                                              local=True if side.endswith("-local") else None)
            for side in sides:
                s = res[side]
                print(f"round {r} {side}: offload {s['mb_per_s']:.0f} MB/s ({s['bytes']} bytes), read {s['read_mb_per_s']:.0f} MB/s",
                      flush=True)
                if side.startswith("py"):
                    assert s["errors"] == 0 and s["missing"] == 0, s
            d, n = res[sides[0]], res[sides[1]]
            rows.append((n["mb_per_s"] / d["mb_per_s"], n["read_mb_per_s"] / d["read_mb_per_s"]))
        off = [x for x, _ in rows]
        rd = [y for _, y in rows]
        print(f"ratio {sides[1]}/{sides[0]}: offload {sum(off) / len(off):.2f} (rounds {', '.join(f'{x:.2f}' for x in off)}), "
              f"BatchGet {sum(rd) / len(rd):.2f} (rounds {', '.join(f'{y:.2f}' for y in rd)})")
        print(f"load average after: {os.getloadavg()}")
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
