"""vLLM secondary offloading tier on kvoffload (vLLM's tiering API is experimental upstream).

Upstream read (vllm-project/vllm, through the public file index; vLLM is too large to
mirror here):

- vllm/v1/kv_offload/tiering/base.py, current: the newest stored text (TransferJob(job_id,
  keys, chunk_ids, is_promotion, req_context); JobResult(job_id, success, successful_keys=None,
  transfer_time=None); SecondaryTierManager(offloading_spec, primary_kv_view, tier_type)
  whose abstract methods are lookup -> LookupResult, submit_store, submit_load,
  get_finished_jobs, on_new_request and drain_jobs, with defaults for has_pending_work,
  take_events, touch, on_request_finished, bind_parent, stop_executor, on_schedule_end,
  shutdown, build_metric_definitions and get_stats; a class attribute medium and an instance
  attribute locality). The revision before it, the one example/manager.py@033af9c5 is
  written against, has the same methods with JobMetadata(job_id, keys, block_ids, ...)
  for TransferJob and JobResult(job_id, success).
- vllm/v1/kv_offload/base.py, current: LookupResult (MISS, HIT, HIT_PENDING, RETRY), Medium,
  Locality, ReqContext, RequestOffloadingContext, ScheduleEndContext, OffloadingEvent(keys,
  medium, removed, locality=None).
- vllm/v1/kv_offload/tiering/factory.py, current: SecondaryTierFactory.create_secondary_tier(
  tier_config, primary_kv_view, offloading_spec) calls tier_cls(offloading_spec=,
  primary_kv_view=, tier_type=, **config); get_tier_class takes a registered "type", or an
  out-of-tree one: "type" names the class and "module_path" its module (popped before the
  call). TieringOffloadingSpec passes itself as offloading_spec and the primary tier's
  get_kv_memoryview(): shape (num_blocks, row_stride_bytes).
- Previous interface, still loadable: tiering/base.py@041410b9 (lookup -> bool | None,
  get_finished, get_request_offloading_context, request_finished, JobMetadata with
  block_ids) with the factory@0411f953, which passes vllm_config= (not offloading_spec=),
  primary_kv_view= and tier_type=.
- tiering/manager.py (TieringOffloadingManager.lookup): a secondary tier's HIT starts a
  promotion, RETRY makes the request wait, anything else is a miss.

Load it with (python/README.md "vLLM"):

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 34359738368,
      "secondary_tiers": [{"type": "KVOffloadTier", "module_path": "kvoffload.vllm",
                           "addrs": "127.0.0.1:7101,127.0.0.1:7102"}]}}'

or, with the package installed in vLLM's environment (its vllm.general_plugins entry point
kvoffload.vllm:register registers the type), {"type": "kvoffload", "addrs": ...}.

Rules and invariants:

- Construction: the tier takes offloading_spec= or vllm_config= (whichever the factory
  passes), primary_kv_view= and tier_type=, then its own options; `addrs` is required and an
  option it does not know is refused, so a wrong secondary_tiers entry fails vLLM's start-up
  with a ValueError naming it. The view must be C-contiguous, 2-D, with rows of at most
  MAX_OBJECT_BYTES.
- Keys: an OffloadKey (raw bytes: block hash + group index) is stored under
  "vllm/<namespace>/<hex of the key>"; block b of a job (chunk_ids, or block_ids before) is row
  b of the primary view, sent from and read into that row without a copy in Python.
- Nothing blocks the scheduler. lookup answers from what this tier knows: HIT once stored or
  found here, MISS after an Absent answer younger than negative_ttl, RETRY otherwise; an
  unknown key is queued and a lookup thread asks the store with one BatchExists for every
  key queued meanwhile (on_schedule_end wakes it too). A store that cannot answer (a
  fail-stopped member) is a MISS: the scheduler computes the block. Under the previous
  interface the answers are True / False / None.
- Jobs: submit_store / submit_load run on worker threads; a store job is one transaction per
  at most MAX_BATCH_KEYS blocks and MAX_BATCH_BYTES bytes and succeeds when every key is
  Stored or AlreadyStored; a load job succeeds when every key is Found with a row's size (a
  partial load reports its successful_keys where JobResult has them). get_finished_jobs
  (get_finished before) returns each result once; has_pending_work is True while a job or
  a lookup is in flight; drain_jobs waits for every job.
- Events: while vLLM publishes KV events (the spec's kv_events_config, else the `events`
  option), take_events reports what the store holds under this tier's namespace as the key
  event stream shows it (docs/api.md "Watching the stored keys"; hint.py's PresenceHint on a
  watcher thread): OffloadingEvent(keys, medium, removed=False, locality) for keys stored (by
  this tier's jobs or by any other instance writing the namespace, and those already stored
  when the tier starts), removed=True for keys removed, evicted, pruned or lost with their
  node, each change once, in stream order. A store key maps back to its OffloadKey by the
  key rule below; keys of other namespaces and other engines are skipped. The watcher
  resumes from its last position after a reconnect, and after a reset reports the
  difference between what it had and the listing. Buffering is bounded (_MAX_EVENT_KEYS keys
  not yet taken): beyond it the watcher waits for take_events, and the store's own window
  (a reset when it is passed) keeps memory bounded on both sides.
- Presence hint (opt-in: the `presence_hint` option; `hint_max_stale` seconds, 1.0 by
  default): lookup answers a key it has no answer for from the watcher's view while that
  view is at most hint_max_stale old, HIT or MISS at once, and asks BatchExists (the
  authority) otherwise. A key stored less than hint_max_stale ago may be a MISS (the block is
  computed); one removed as recently may be a HIT (the load then misses: JobResult reports
  it and the key is forgotten). Without the option the stream only invalidates: a removed
  key is asked again.
- on_new_request returns the default RequestOffloadingContext; on_request_finished drops the
  request's lookups not yet sent; get_stats returns None (kvoffload's counters are the
  tier's stats() and the store's own); touch is nothing (kvoffload's eviction needs no
  hint).

The engine is imported only when KVOffloadTier is first used (import kvoffload.vllm imports
neither vllm nor torch).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import queue
import re
import sys
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Collection, Dict, Iterable, List, Optional

from . import _engine
from .client import Client
from .hint import PresenceHint
from .local import local_path
from .types import MAX_BATCH_BYTES, MAX_BATCH_KEYS, MAX_OBJECT_BYTES, GetStatus, Presence, new_txn_id

if TYPE_CHECKING:  # the annotations name vLLM's types as tiering/base.py does
    from vllm.v1.kv_offload.base import (LookupResult, OffloadingEvent, OffloadKey, ReqContext,
                                         RequestOffloadingContext, ScheduleEndContext)
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadingConnectorStats
    from vllm.v1.kv_offload.tiering.base import JobResult, TransferJob

logger = logging.getLogger(__name__)

__all__ = ["KVOffloadTier", "register", "TIER_TYPE", "OPTIONS"]

TIER_TYPE = "kvoffload"
OPTIONS = ("addrs", "namespace", "timeout", "token", "token_file", "tls_ca", "insecure_token", "local", "workers",
           "negative_ttl", "events", "presence_hint", "hint_max_stale", "module_path")
_MAX_EVENT_KEYS = 65536  # keys of events not yet taken; the watcher waits beyond it
_HEX = re.compile(r"[0-9a-f]{10,}")  # an OffloadKey in hex: a block hash and 4 bytes of group index


class _KVOffloadTier:
    def __init__(self, offloading_spec: Any = None, primary_kv_view: Optional[memoryview] = None,
                 tier_type: str = TIER_TYPE, *, vllm_config: Any = None, addrs: Any = None, namespace: str = "",
                 timeout: float = 30.0, token: Optional[str] = None, token_file: Optional[str] = None,
                 tls_ca: Optional[str] = None, insecure_token: bool = False, local: Optional[bool] = None,
                 workers: int = 4, negative_ttl: float = 1.0, events: Optional[bool] = None,
                 presence_hint: bool = False, hint_max_stale: float = 1.0, module_path: Optional[str] = None, client: Optional[Client] = None, **unknown: Any):
        where = f"kvoffload vLLM tier {tier_type!r} (a secondary_tiers entry)"
        if unknown:
            raise ValueError(f"{where}: unknown option(s) {', '.join(sorted(unknown))}; known: {', '.join(OPTIONS)}")
        if client is None and not addrs:
            raise ValueError(f"{where}: \"addrs\" is not set (the kvoffload members, \"host:port,host:port\" or "
                             f"\"unix:///PATH\" of a node's --local-socket)")
        if not (float(timeout) > 0 and float(negative_ttl) >= 0 and int(workers) >= 1 and float(hint_max_stale) > 0):
            raise ValueError(f"{where}: timeout and hint_max_stale must be positive, negative_ttl not negative, "
                             f"workers at least 1")
        view = primary_kv_view
        if view is None or view.ndim != 2 or not view.c_contiguous:
            raise ValueError(f"{where}: primary_kv_view must be a C-contiguous 2-D memoryview "
                             f"(blocks, bytes per block), not {None if view is None else (view.ndim, view.shape)}")
        self.block_bytes = view.shape[1] * view.itemsize
        if not 0 < self.block_bytes <= MAX_OBJECT_BYTES:
            raise ValueError(f"{where}: a block of {self.block_bytes} bytes; kvoffload stores objects of at most "
                             f"{MAX_OBJECT_BYTES} (MaxObjectBytes)")
        if vllm_config is None:
            vllm_config = getattr(offloading_spec, "vllm_config", None)
        self.vllm_config = vllm_config
        self._base_init(offloading_spec, vllm_config, view, tier_type)
        self._flat = view.cast("B") if view.format == "B" else view.cast("B", (view.nbytes,))
        self._blocks = view.shape[0]
        self.client = client or _engine.client_from(
            {"addrs": addrs, "timeout": timeout, "token": token, "token_file": token_file, "tls_ca": tls_ca,
             "insecure_token": insecure_token, "local": local})
        self._ns = f"vllm/{namespace}/" if namespace else "vllm/"
        self._api = _Api.of(type(self))
        if self._api.locality is not None:
            unix = all(local_path(a) for a in _addrs_of(addrs)) if addrs else False
            self.locality = self._api.locality.LOCAL if unix else self._api.locality.REMOTE
        self._pool = ThreadPoolExecutor(max_workers=int(workers), thread_name_prefix="kvoffload-vllm")
        self._done: "queue.SimpleQueue" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._negative_ttl = float(negative_ttl)
        self._known: Dict[bytes, Any] = {}  # key -> True (stored or found here) or the time of an Absent answer
        self._storing: Dict[bytes, int] = {}  # key -> store jobs in flight with it
        self._pending: "OrderedDict[bytes, set]" = OrderedDict()  # key -> requests waiting for its lookup
        self._asking: set = set()  # keys of the BatchExists in flight
        self._jobs = 0
        if events is None:
            events = _events_enabled(offloading_spec, vllm_config)
        if not self._api.has_events:  # the previous interface has no events
            events = False
        self._events: Optional[deque] = deque() if events else None
        self._event_keys = 0
        self._use_hint = bool(presence_hint)
        self._stats = dict(lookups=0, hits=0, misses=0, exists_calls=0, hint_answers=0, store_jobs=0, stored_keys=0,
                           store_failures=0, load_jobs=0, loaded_keys=0, load_failures=0, events_stored=0,
                           events_removed=0)
        self._wake = threading.Event()
        self._closed = False
        self._asker = threading.Thread(target=self._ask_loop, name="kvoffload-vllm-lookup", daemon=True)
        self._asker.start()
        self.hint: Optional[PresenceHint] = None
        if events or self._use_hint:
            self.hint = PresenceHint(self.client, prefix=self._ns, key_filter=self._ours,
                                     max_stale=float(hint_max_stale), on_change=self._on_change,
                                     name="kvoffload-vllm-events")
        logger.info("kvoffload vLLM tier %r: members %s, %d blocks of %d bytes", tier_type, addrs, self._blocks,
                    self.block_bytes)

    def _base_init(self, spec, vllm_config, view, tier_type) -> None:
        base = next((c for c in type(self).__mro__[1:] if c.__name__ == "SecondaryTierManager"), None)
        names = set(inspect.signature(base.__init__).parameters) if base is not None else set()
        kw: Dict[str, Any] = {"primary_kv_view": view}
        if "offloading_spec" in names:
            kw["offloading_spec"] = spec
        if "vllm_config" in names:
            kw["vllm_config"] = vllm_config
        if "tier_type" in names:
            kw["tier_type"] = tier_type
        if base is not None:
            base.__init__(self, **kw)
        self._offloading_spec, self._primary_kv_view, self.tier_type = spec, view, tier_type

    @staticmethod
    def get_tier_type() -> str:
        return TIER_TYPE

    def _k(self, key: bytes) -> str:
        return self._ns + bytes(key).hex()

    def _ours(self, key: str) -> bool:
        """Whether a store key is one of this tier's: the namespace prefix, then an OffloadKey
        in lowercase hex (what _k writes), nothing else."""
        return _HEX.fullmatch(key, len(self._ns)) is not None and (len(key) - len(self._ns)) % 2 == 0

    def _row(self, block_id: int) -> memoryview:
        b = int(block_id)
        if not 0 <= b < self._blocks:
            raise IndexError(f"block {b} outside the primary view's {self._blocks}")
        return self._flat[b * self.block_bytes:(b + 1) * self.block_bytes]

    def stats(self) -> Dict[str, int]:
        """This tier's counters since it started (lookups, hits, misses, BatchExists calls,
        jobs, keys and failures of stores and loads)."""
        with self._lock:
            return dict(self._stats)

    # -- lookups -------------------------------------------------------------------------

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        key = bytes(key)
        api = self._api
        with self._lock:
            self._stats["lookups"] += 1
            k = self._known.get(key)
            if k is True:
                self._stats["hits"] += 1
                return api.HIT
            if key in self._storing or key in self._asking:
                return api.RETRY
            if k is not None and time.monotonic() - k < self._negative_ttl:
                self._stats["misses"] += 1
                return api.MISS
            if self._use_hint and self.hint is not None:
                p = self.hint.present(self._k(key))
                if p is not None:
                    self._stats["hint_answers"] += 1
                    self._stats["hits" if p else "misses"] += 1
                    return api.HIT if p else api.MISS
            self._pending.setdefault(key, set()).add(getattr(req_context, "req_id", None))
        self._wake.set()
        return api.RETRY

    def _ask_loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closed:
                return
            while True:
                with self._lock:
                    keys = []
                    while self._pending and len(keys) < MAX_BATCH_KEYS:
                        k, _ = self._pending.popitem(last=False)
                        keys.append(k)
                    self._asking.update(keys)
                if not keys:
                    break
                self._ask(keys)

    def _ask(self, keys: List[bytes]) -> None:
        try:
            ps = self.client.batch_exists([self._k(k) for k in keys]).keys
        except Exception as e:
            # A miss, remembered as an Absent answer is: the scheduler computes the block
            # instead of waiting on a store that cannot answer now (a fail-stopped member).
            logger.warning("kvoffload: lookup of %d keys failed: %s", len(keys), e)
            ps = [Presence.ABSENT] * len(keys)
        now = time.monotonic()
        with self._lock:
            self._stats["exists_calls"] += 1
            for k, p in zip(keys, ps):
                if p == Presence.PRESENT:
                    self._known[k] = True
                elif self._known.get(k) is not True and p != Presence.IN_FLIGHT:
                    self._known[k] = now  # Absent or Unknown: a miss for negative_ttl
            self._asking.difference_update(keys)
            self._idle.notify_all()

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        if self._pending:
            self._wake.set()

    def touch(self, keys: Collection[OffloadKey], req_context: ReqContext):
        return None  # kvoffload's eviction needs no recency hint from here

    # -- requests ------------------------------------------------------------------------

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return self._api.request_context()

    def on_request_finished(self, req_context: ReqContext) -> None:
        rid = getattr(req_context, "req_id", None)
        with self._lock:
            for k in [k for k, reqs in self._pending.items() if rid in reqs]:
                reqs = self._pending[k]
                reqs.discard(rid)
                if not reqs:
                    del self._pending[k]

    # The previous interface's names (tiering/base.py@041410b9).
    def get_request_offloading_context(self, req_context: ReqContext) -> RequestOffloadingContext:
        return self.on_new_request(req_context)

    def request_finished(self, req_context: ReqContext) -> None:
        self.on_request_finished(req_context)

    # -- jobs ----------------------------------------------------------------------------

    @staticmethod
    def _slots(job: Any) -> List[int]:
        ids = getattr(job, "chunk_ids", None)
        if ids is None:
            ids = job.block_ids
        return [int(b) for b in ids]

    def _result(self, job_id: int, ok: bool, successful_keys: Optional[List[bytes]] = None,
                took: Optional[float] = None) -> None:
        self._done.put(self._api.job_result(job_id, ok, successful_keys, took))
        with self._lock:
            self._jobs -= 1
            self._idle.notify_all()

    def submit_store(self, job_metadata: TransferJob) -> None:
        keys = [bytes(k) for k in job_metadata.keys]
        slots = self._slots(job_metadata)
        if len(keys) != len(slots):
            raise ValueError(f"store job {job_metadata.job_id}: {len(keys)} keys for {len(slots)} blocks")
        with self._lock:
            for k in keys:
                self._storing[k] = self._storing.get(k, 0) + 1
            self._jobs += 1
            self._stats["store_jobs"] += 1
        self._pool.submit(self._store, job_metadata.job_id, keys, slots)

    def _store(self, job_id: int, keys: List[bytes], slots: List[int]) -> None:
        ok, stored, t0 = True, [], time.monotonic()
        step = max(1, min(MAX_BATCH_KEYS, MAX_BATCH_BYTES // self.block_bytes))
        try:
            for i in range(0, len(keys), step):
                ks, bs = keys[i:i + step], slots[i:i + step]
                try:
                    res = self.client.batch_offload(new_txn_id(), [(self._k(k), self._row(b)) for k, b in zip(ks, bs)])
                except Exception as e:
                    logger.error("kvoffload: store job %d failed: %s", job_id, e)
                    ok = False
                    continue
                for k, r in zip(ks, res):
                    if r.ok:
                        stored.append(k)
                    else:
                        ok = False
                        logger.error("kvoffload: store of %s: %s %s: %s", r.key, r.outcome.name, r.code, r.reason)
        finally:
            with self._lock:
                for k in stored:
                    self._known[k] = True
                for k in keys:
                    c = self._storing.get(k, 0) - 1
                    if c > 0:
                        self._storing[k] = c
                    else:
                        self._storing.pop(k, None)
                self._stats["stored_keys"] += len(stored)
                self._stats["store_failures"] += 0 if ok else 1
            self._result(job_id, ok, None, time.monotonic() - t0)

    def submit_load(self, job_metadata: TransferJob) -> None:
        keys = [bytes(k) for k in job_metadata.keys]
        slots = self._slots(job_metadata)
        if len(keys) != len(slots):
            raise ValueError(f"load job {job_metadata.job_id}: {len(keys)} keys for {len(slots)} blocks")
        with self._lock:
            self._jobs += 1
            self._stats["load_jobs"] += 1
        self._pool.submit(self._load, job_metadata.job_id, keys, slots)

    def _load(self, job_id: int, keys: List[bytes], slots: List[int]) -> None:
        good: List[bytes] = []
        gone: List[bytes] = []
        t0 = time.monotonic()
        try:
            for i in range(0, len(keys), MAX_BATCH_KEYS):
                ks, bs = keys[i:i + MAX_BATCH_KEYS], slots[i:i + MAX_BATCH_KEYS]
                try:
                    got = self.client.batch_get_into([self._k(k) for k in ks], [self._row(b) for b in bs])
                except Exception as e:
                    logger.error("kvoffload: load job %d failed: %s", job_id, e)
                    continue
                for k, g in zip(ks, got):
                    if g.status == GetStatus.FOUND and g.size == self.block_bytes:
                        good.append(k)
                        continue
                    if g.status == GetStatus.NOT_FOUND:
                        gone.append(k)
                    logger.warning("kvoffload: load of %s: %s (%d bytes of %d): %s", g.key, g.status.name, g.size,
                                   self.block_bytes, g.reason)
        finally:
            ok = len(good) == len(keys)
            now = time.monotonic()
            with self._lock:
                for k in good:
                    self._known[k] = True
                for k in gone:  # evicted since it was found
                    self._known[k] = now
                self._stats["loaded_keys"] += len(good)
                self._stats["load_failures"] += 0 if ok else 1
            self._result(job_id, ok, None if ok else good, now - t0)

    def get_finished_jobs(self) -> Iterable[JobResult]:
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def get_finished(self) -> Iterable[JobResult]:  # the previous interface's name
        return self.get_finished_jobs()

    def has_pending_work(self) -> bool:
        with self._lock:
            return self._jobs > 0 or bool(self._pending) or bool(self._asking) or not self._done.empty()

    def drain_jobs(self, *, timeout: Optional[float] = None) -> None:
        """Blocks until every submitted job has finished (each call has the client's timeout,
        so this ends); its result is then in get_finished_jobs()."""
        with self._lock:
            if not self._idle.wait_for(lambda: self._jobs == 0, timeout):
                raise TimeoutError(f"kvoffload tier: {self._jobs} jobs still running after {timeout} s")

    # -- events, stats, shutdown ---------------------------------------------------------

    def _on_change(self, changes: List[Any]) -> None:
        """The watcher's changes of this namespace (rule Events): the lookup's knowledge
        follows them (a removed key is asked again; a stored one is a HIT only under
        presence_hint), then runs of one kind become one event each, queued for take_events
        once there is room."""
        now = time.monotonic()
        runs: List[Any] = []
        for ev in changes:
            key = bytes.fromhex(ev.key[len(self._ns):])
            removed = ev.kind == "removed"
            if runs and runs[-1][1] == removed:
                runs[-1][0].append(key)
            else:
                runs.append(([key], removed))
        with self._lock:
            for keys, removed in runs:
                for k in keys:
                    if removed:
                        self._known[k] = now
                    elif self._use_hint:
                        self._known[k] = True
            if self._events is None:
                return
            n = len(changes)
            while self._event_keys and self._event_keys + n > _MAX_EVENT_KEYS and not self._closed:
                self._idle.wait(0.5)
            for keys, removed in runs:
                self._events.append((keys, removed))
                self._stats["events_removed" if removed else "events_stored"] += len(keys)
            self._event_keys += n

    def take_events(self) -> Iterable[OffloadingEvent]:
        if self._events is None:
            return []
        out = []
        with self._lock:
            while self._events:
                keys, removed = self._events.popleft()
                out.append(self._api.event(keys, self, removed))
            self._event_keys = 0
            self._idle.notify_all()
        return out

    def get_stats(self) -> OffloadingConnectorStats | None:
        return None  # vLLM's stats payload differs between its revisions; see stats()

    def stop_executor(self) -> None:
        """Stops the lookup thread (idempotent); lookups then stay RETRY until shutdown."""
        self._closed = True
        self._wake.set()
        with self._lock:
            self._idle.notify_all()
        if self.hint is not None:
            self.hint.close()
        if self._asker is not threading.current_thread():
            self._asker.join(timeout=60)

    def shutdown(self) -> None:
        self.stop_executor()
        self._pool.shutdown(wait=True)
        self.client.close()


def _addrs_of(addrs: Any) -> List[str]:
    if isinstance(addrs, str):
        return [a.strip() for a in addrs.split(",") if a.strip()]
    return list(addrs)


def _events_enabled(spec: Any, vllm_config: Any) -> bool:
    """Whether vLLM publishes KV events (and so drains take_events): the spec's
    kv_events_config, else vllm_config's; True when neither says."""
    for cfg in (getattr(spec, "kv_events_config", None), getattr(vllm_config, "kv_events_config", None)):
        if cfg is not None and hasattr(cfg, "enable_kv_cache_events"):
            return bool(cfg.enable_kv_cache_events)
    return True


class _Api:
    """The vLLM interface the tier class was made against: the tiering base module's lookup
    answers, job result and event types."""

    _cache: Dict[type, "_Api"] = {}

    def __init__(self, tier_base_module: Any, kv_base_module: Any):
        lr = getattr(tier_base_module, "LookupResult", None)
        if lr is None:  # the previous interface: True / False / None
            self.HIT, self.MISS, self.RETRY = True, False, None
        else:
            self.HIT, self.MISS, self.RETRY = lr.HIT, lr.MISS, lr.RETRY
        self._job_result = tier_base_module.JobResult
        fields = {f.name for f in dataclasses.fields(self._job_result)} if dataclasses.is_dataclass(
            self._job_result) else set(inspect.signature(self._job_result).parameters)
        self._partial = "successful_keys" in fields
        self._timed = "transfer_time" in fields
        self._ctx = getattr(kv_base_module, "RequestOffloadingContext", None)
        self._event = getattr(kv_base_module, "OffloadingEvent", None)
        medium = getattr(kv_base_module, "Medium", None)
        self.medium = medium.STORAGE if medium is not None else "kvoffload"
        self.locality = getattr(kv_base_module, "Locality", None)
        self.has_events = self._event is not None
        self._event_fields = (set(f.name for f in dataclasses.fields(self._event))
                              if self._event is not None and dataclasses.is_dataclass(self._event) else set())

    @classmethod
    def of(cls, tier_cls: type) -> "_Api":
        api = cls._cache.get(tier_cls)
        if api is None:
            base = next(c for c in tier_cls.__mro__ if c.__name__ == "SecondaryTierManager")
            api = cls._cache[tier_cls] = cls(sys.modules[base.__module__],
                                             sys.modules[base.__module__.rsplit(".", 2)[0] + ".base"])
        return api

    def job_result(self, job_id: int, ok: bool, successful_keys: Optional[List[bytes]], took: Optional[float]):
        kw: Dict[str, Any] = {"job_id": job_id, "success": ok}
        if self._partial and successful_keys is not None:
            kw["successful_keys"] = successful_keys
        if self._timed and took is not None:
            kw["transfer_time"] = took
        return self._job_result(**kw)

    def request_context(self):
        return self._ctx() if self._ctx is not None else None

    def event(self, keys: List[bytes], tier: Any, removed: bool = False):
        kw: Dict[str, Any] = {"keys": list(keys), "medium": getattr(tier, "medium", None) or self.medium,
                              "removed": removed}
        if "locality" in self._event_fields:
            kw["locality"] = getattr(tier, "locality", None)
        return self._event(**kw)


_classes: Dict[type, type] = {}


def _tier_class() -> type:
    """KVOffloadTier made against the SecondaryTierManager importable now (one class per
    base: a process has one vLLM, tests swap the stubs)."""
    from vllm.v1.kv_offload.tiering.base import SecondaryTierManager

    cls = _classes.get(SecondaryTierManager)
    if cls is None:
        attrs: Dict[str, Any] = {"__module__": __name__, "__doc__": __doc__}
        kv_base = sys.modules[SecondaryTierManager.__module__.rsplit(".", 2)[0] + ".base"]
        if getattr(kv_base, "Medium", None) is not None:
            attrs["medium"] = kv_base.Medium.STORAGE
        cls = _classes[SecondaryTierManager] = type("KVOffloadTier", (_KVOffloadTier, SecondaryTierManager), attrs)
    return cls


def __getattr__(name: str):
    if name == "KVOffloadTier":
        return _tier_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register() -> None:
    """The vllm.general_plugins entry point: registers the "kvoffload" tier type with
    SecondaryTierFactory (a factory with out-of-tree module_path support needs no
    registration: {"type": "KVOffloadTier", "module_path": "kvoffload.vllm"})."""
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    if TIER_TYPE not in getattr(SecondaryTierFactory, "_registry", {}):
        SecondaryTierFactory.register_tier(TIER_TYPE, __name__, "KVOffloadTier")
