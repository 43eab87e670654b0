"""vLLM secondary offloading tier on kvoffload (experimental upstream).

vLLM's interface: vllm/v1/kv_offload/tiering/base.py (SecondaryTierManager) in
vllm-project/vllm; tiers are created by SecondaryTierFactory (tiering/factory.py) from the
"secondary_tiers" list of the offloading connector's extra config, by their "type", which a
plugin registers. This package registers "kvoffload" through the vllm.general_plugins entry
point (python/pyproject.toml, kvoffload.vllm:register). Load it with

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "secondary_tiers": [{"type": "kvoffload", "addrs": "127.0.0.1:7101,127.0.0.1:7102"}]}}'

Mapping: an OffloadKey (raw bytes: block hash + group index) is stored under
"vllm/<namespace>/<hex of the key>" (keys on the wire are UTF-8 strings); a block is the row
block_ids[i] of the primary tier's CPU memoryview (shape (blocks, bytes per block)), sent
from and read into that row without a copy in Python. Nothing blocks the scheduler:
submit_store and submit_load run on worker threads and report through get_finished();
lookup answers from what this tier knows (stored or loaded here, or an earlier BatchExists),
None while a key is being stored or being looked up (a BatchExists is started in the
background), True / False once known. A store job is one kvoffload transaction; it succeeds
when every key is Stored or AlreadyStored. The engine is imported only on first use.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Collection, Dict, Iterable, Optional

from . import _engine
from .client import Client
from .types import GetStatus, Presence, new_txn_id

logger = logging.getLogger(__name__)

__all__ = ["KVOffloadTier", "register", "TIER_TYPE"]

TIER_TYPE = "kvoffload"


class _KVOffloadTier:
    def __init__(self, offloading_spec: Any = None, primary_kv_view: Optional[memoryview] = None,
                 tier_type: str = TIER_TYPE, *, addrs: Any = "127.0.0.1:7100", namespace: str = "",
                 timeout: float = 30.0, token: Optional[str] = None, token_file: Optional[str] = None,
                 tls_ca: Optional[str] = None, workers: int = 4, negative_ttl: float = 1.0,
                 local: Optional[bool] = None,
                 client: Optional[Client] = None, **unknown: Any):
        if unknown:
            logger.warning("kvoffload: unknown tier options %s ignored", sorted(unknown))
        self._base_init(offloading_spec, primary_kv_view, tier_type)
        view = primary_kv_view
        if view is None or view.ndim != 2:
            raise ValueError("kvoffload tier: primary_kv_view must be a 2-D memoryview (blocks, bytes per block)")
        self.block_bytes = view.shape[1] * view.itemsize
        self._flat = view.cast("B") if view.format != "B" else view.cast("B", (view.nbytes,))
        self.client = client or _engine.client_from(
            {"addrs": addrs, "timeout": timeout, "token": token, "token_file": token_file, "tls_ca": tls_ca,
             "local": local})
        self._ns = f"vllm/{namespace}/" if namespace else "vllm/"
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kvoffload-vllm")
        self._done: "queue.SimpleQueue" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._known: Dict[bytes, Any] = {}  # key -> True, or (False, time) for a recent miss
        self._busy: set = set()  # keys being stored or looked up
        self._negative_ttl = negative_ttl
        self._jobs = 0  # submitted jobs not yet finished
        self._idle = threading.Condition(self._lock)

    def _base_init(self, spec, view, tier_type) -> None:
        try:
            super().__init__(offloading_spec=spec, primary_kv_view=view, tier_type=tier_type)
        except TypeError:
            self._offloading_spec, self._primary_kv_view, self.tier_type = spec, view, tier_type

    def _k(self, key: bytes) -> str:
        return self._ns + bytes(key).hex()

    def _row(self, block_id: int) -> memoryview:
        b = int(block_id)
        return self._flat[b * self.block_bytes:(b + 1) * self.block_bytes]

    # -- lookups -------------------------------------------------------------------------

    def lookup(self, key: bytes, req_context: Any) -> Optional[bool]:
        key = bytes(key)
        with self._lock:
            if key in self._busy:
                return None
            k = self._known.get(key)
            if k is True:
                return True
            if k is not None and time.monotonic() - k[1] < self._negative_ttl:
                return False
            self._busy.add(key)
        self._pool.submit(self._exists, key)
        return None

    def _exists(self, key: bytes) -> None:
        try:
            p = self.client.batch_exists([self._k(key)]).keys[0]
            with self._lock:
                if p == Presence.PRESENT:
                    self._known[key] = True
                elif p == Presence.ABSENT:
                    self._known[key] = (False, time.monotonic())
        except Exception as e:
            # A miss, remembered as an ABSENT answer is: the scheduler computes the block
            # instead of waiting on a store that cannot answer now (a fail-stopped member).
            logger.warning("kvoffload: lookup failed: %s", e)
            with self._lock:
                self._known[key] = (False, time.monotonic())
        finally:
            with self._lock:
                self._busy.discard(key)

    def touch(self, keys: Collection[bytes], req_context: Any) -> None:
        return None  # kvoffload's eviction needs no recency hint from here

    # -- jobs ----------------------------------------------------------------------------

    def _result(self, job_id: int, ok: bool) -> None:
        from vllm.v1.kv_offload.tiering.base import JobResult

        self._done.put(JobResult(job_id=job_id, success=ok))
        with self._lock:
            self._jobs -= 1
            self._idle.notify_all()

    def submit_store(self, job_metadata: Any) -> None:
        keys = [bytes(k) for k in job_metadata.keys]
        with self._lock:
            self._busy.update(keys)
            self._jobs += 1
        self._pool.submit(self._store, job_metadata.job_id, keys, list(job_metadata.block_ids))

    def _store(self, job_id: int, keys, block_ids) -> None:
        ok = False
        try:
            res = self.client.batch_offload(new_txn_id(), [(self._k(k), self._row(b)) for k, b in zip(keys, block_ids)])
            for r in res:
                if not r.ok:
                    logger.error("kvoffload: store of %s: %s %s: %s", r.key, r.outcome.name, r.code, r.reason)
            ok = all(r.ok for r in res)
            with self._lock:
                for k, r in zip(keys, res):
                    if r.ok:
                        self._known[k] = True
        except Exception as e:
            logger.error("kvoffload: store job %d failed: %s", job_id, e)
        finally:
            with self._lock:
                self._busy.difference_update(keys)
            self._result(job_id, ok)

    def submit_load(self, job_metadata: Any) -> None:
        keys = [bytes(k) for k in job_metadata.keys]
        with self._lock:
            self._jobs += 1
        self._pool.submit(self._load, job_metadata.job_id, keys, list(job_metadata.block_ids))

    def _load(self, job_id: int, keys, block_ids) -> None:
        ok = False
        try:
            got = self.client.batch_get_into([self._k(k) for k in keys], [self._row(b) for b in block_ids])
            ok = all(g.status == GetStatus.FOUND and g.size == self.block_bytes for g in got)
            if not ok:
                bad = next(g for g in got if not (g.status == GetStatus.FOUND and g.size == self.block_bytes))
                logger.warning("kvoffload: load of %s: %s (%d bytes): %s", bad.key, bad.status.name, bad.size, bad.reason)
        except Exception as e:
            logger.error("kvoffload: load job %d failed: %s", job_id, e)
        finally:
            self._result(job_id, ok)

    def get_finished(self) -> Iterable[Any]:
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    # Later upstream revisions name the poll get_finished_jobs and add drain_jobs
    # (vllm/v1/kv_offload/tiering/example/manager.py); both are offered.
    def get_finished_jobs(self) -> Iterable[Any]:
        return self.get_finished()

    def drain_jobs(self, timeout: float = 60.0) -> None:
        """Waits until every submitted job has finished (shutdown, tests); never called by
        the scheduler's hot path."""
        with self._lock:
            if not self._idle.wait_for(lambda: self._jobs == 0, timeout):
                raise TimeoutError(f"kvoffload tier: {self._jobs} jobs still running after {timeout} s")

    def get_request_offloading_context(self, req_context: Any):
        from vllm.v1.kv_offload.base import RequestOffloadingContext

        return RequestOffloadingContext()

    def request_finished(self, req_context: Any) -> None:
        return None

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)
        self.client.close()


_cls = None


def __getattr__(name: str):
    global _cls
    if name == "KVOffloadTier":
        if _cls is None:
            from vllm.v1.kv_offload.tiering.base import SecondaryTierManager

            _cls = type("KVOffloadTier", (_KVOffloadTier, SecondaryTierManager),
                        {"__module__": __name__, "__doc__": __doc__})
        return _cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register() -> None:
    """The vllm.general_plugins entry point: registers the "kvoffload" tier type."""
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    if TIER_TYPE not in SecondaryTierFactory._registry:
        SecondaryTierFactory.register_tier(TIER_TYPE, __name__, "KVOffloadTier")
