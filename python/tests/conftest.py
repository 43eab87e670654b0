"""Fixtures: a storenode binary built once per session, and storenode serve clusters (one
node, three nodes) on 127.0.0.1 with free ports and temporary directories, started the way
chaos/procs_test.go starts them (the first node bootstraps, the others --join its peer
address, readiness is GET /readyz on --http-addr)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE / "stubs"))  # the engine stubs: sglang, lmcache, vllm

_used_ports: set = set()


def free_addr() -> str:
    """127.0.0.1:port whose port was free a moment ago and no other call returned."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _used_ports:
            _used_ports.add(port)
            return f"127.0.0.1:{port}"


def _build(out: Path, *flags: str) -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    t0 = time.monotonic()
    r = subprocess.run([go, "build", *flags, "-o", str(out), "./cmd/storenode"], cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"go build {' '.join(flags)} ./cmd/storenode failed:\n{r.stdout}{r.stderr}")
    print(f"built storenode {' '.join(flags)} in {time.monotonic() - t0:.1f} s")
    return str(out)


@pytest.fixture(scope="session")
def storenode_bin(tmp_path_factory) -> str:
    """go build -o <tmp>/storenode ./cmd/storenode from the repository root, once."""
    return _build(tmp_path_factory.mktemp("bin") / "storenode")


@pytest.fixture(scope="session")
def storenode_chaos_bin(tmp_path_factory) -> str:
    """storenode built with -tags chaos: the failpoints of internal/failpoint armed from the
    KVOFFLOAD_FAILPOINTS environment variable."""
    return _build(tmp_path_factory.mktemp("bin") / "storenode-chaos", "-tags", "chaos")


class Proc:
    def __init__(self, id: str, data: str):
        self.id, self.data = id, data
        self.raft, self.api, self.peer, self.http = free_addr(), free_addr(), free_addr(), free_addr()
        self.popen: subprocess.Popen | None = None
        self.log = data + ".log"

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


class Cluster:
    def __init__(self, binary: str, n: int, base: str, extra_args=(), env=None):
        self.binary, self.base, self.extra, self.env = binary, base, list(extra_args), env
        self.procs = [Proc(f"n{i + 1}", os.path.join(base, f"n{i + 1}")) for i in range(n)]
        for p in self.procs:
            self.start(p)
            self.wait_ready(p, 30)

    @property
    def addrs(self):
        return [p.api for p in self.procs]

    def start(self, p: Proc) -> None:
        args = [self.binary, "serve", "--id", p.id, "--data", p.data, "--raft-addr", p.raft,
                "--api-addr", p.api, "--peer-addr", p.peer, "--http-addr", p.http, "--log-level", "warn"]
        if p is not self.procs[0]:
            args += ["--join", self.procs[0].peer]
        args += self.extra
        p.popen = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(p.log, "ab"), env=self.env)

    def wait_ready(self, p: Proc, limit: float) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{p.http}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if not p.alive():
                raise RuntimeError(f"{p.id} exited before it was ready:\n{Path(p.log).read_text()[-3000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"{p.id} not ready after {limit} s")

    def kill(self, p: Proc) -> None:
        p.popen.send_signal(signal.SIGKILL)
        p.popen.wait()

    def stop(self) -> None:
        for p in self.procs:
            if p.alive():
                p.popen.send_signal(signal.SIGTERM)
        for p in self.procs:
            if p.popen is None:
                continue
            try:
                p.popen.wait(15)
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()


def _cluster(binary, n, extra=(), local=False, env=None):
    base = tempfile.mkdtemp(prefix=f"kvoffload-py-{n}n-")
    sock = os.path.join(base, "local.sock")
    c = Cluster(binary, n, base, list(extra) + (["--local-socket", sock] if local else []), env=env)
    c.local_addr = "unix://" + sock if local else None
    return c, base


@pytest.fixture(scope="session")
def node1(storenode_bin):
    """One storenode serve node for the whole session, with a --local-socket (the
    shared-memory path, docs/design.md "The local path"): node1.addrs are its TCP API,
    node1.local_addr is "unix://<base>/local.sock"."""
    c, base = _cluster(storenode_bin, 1, local=True)
    yield c
    c.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def cluster3(storenode_bin):
    """Three nodes joined, fresh for each test that uses it (the failover test kills one)."""
    c, base = _cluster(storenode_bin, 3)
    yield c
    c.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def seed(request) -> int:
    """The seed of a randomized test: KVOFFLOAD_SEED or a fresh one, printed (pytest shows it
    on failure; -s shows it always)."""
    s = int(os.environ.get("KVOFFLOAD_SEED") or random.SystemRandom().randrange(1 << 31))
    print(f"{request.node.name}: seed {s} (rerun with KVOFFLOAD_SEED={s})")
    return s


def payload(key: str, size: int) -> bytes:
    """A block derived from its key (as storenode replay does), so a wrong block shows."""
    import hashlib

    h = hashlib.sha256(key.encode()).digest()
    return (h * (size // len(h) + 1))[:size]


def seed_requests(seed: int, tag: str) -> list[list[str]]:
    """The seed's scenario (Mooncake issue #2827): 96 requests whose keys share prefixes
    (chained block hashes, 6 prefixes of up to 8 blocks) plus up to 3 blocks of their own."""
    rnd = random.Random(seed)
    prefixes = [[f"{tag}/{seed}/p{p}/b{b}" for b in range(8)] for p in range(6)]
    requests = []
    for r in range(96):
        pre = rnd.choice(prefixes)[: rnd.randint(1, 8)]
        requests.append(pre + [f"{tag}/{seed}/r{r}/b{b}" for b in range(rnd.randint(0, 3))])
    return requests


def offload_concurrently(client, requests: list[list[str]], block: int, writers: int = 32) -> list:
    """Offloads requests from writers threads (request i by thread i % writers), each key's
    value payload(key, block); returns the failures: non-OK results or errors, per batch."""
    import threading

    import kvoffload

    failures, lock = [], threading.Lock()

    def writer(w):
        for req in requests[w::writers]:
            try:
                res = client.batch_offload(kvoffload.new_txn_id(), [(k, payload(k, block)) for k in req])
                bad = [r for r in res if not r.ok]
            except kvoffload.KVOffloadError as e:
                bad = [e]
            if bad:
                with lock:
                    failures.append(bad)

    ts = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return failures
