"""Consumers of the key event stream that run beside an engine: Follower (a thread that keeps
reading Client.watch, resuming from its last position) and PresenceHint (the stored keys
under a prefix, kept by a Follower, answered with a staleness bound). docs/api.md "Watching
the stored keys" has the stream's positions, reset and guarantees; issue 32 is why.

Rules and invariants:

- A Follower reads the stream in rounds: Client.watch(pos, until_now=True), then a pause of
  `interval`, then the next round from the last position it delivered. A round that ends
  normally proves that every change committed when it began was delivered: `synced_at` is
  that beginning (time.monotonic()), so `time.monotonic() - synced_at` bounds how stale the
  consumer's view is. A round that fails (every member unreachable, the call's deadline) is
  counted in `reconnects` and retried after a backoff from the same position: what was
  delivered stays delivered, nothing is delivered twice (Client.watch checks the order).
- Delivery: on_batch(events) on the Follower's thread, in stream order, at most max_batch
  events at a time, with the raw kinds (stored, removed, reset, listed). A round broken
  during a listing is followed by a new listing (list_keys), so a consumer that sees a reset
  replaces its view with the listing after it. on_batch may block: the Follower then stops
  reading, and a member whose window passes it sends a reset (bounded memory on both sides).
  An exception in on_batch is logged and the batch counts as delivered.
- A Follower started without from_pos begins with a listing of the whole state (list_keys),
  so its consumer starts from what is stored, not from the log's beginning.
- PresenceHint keeps the keys (of the Follower's events) that pass its filter: `prefix` and
  `key_filter`. A listing replaces them once it is complete (a listing cut short is
  discarded); the difference with the previous view is reported to on_change as "stored"
  events and "removed" events of cause "unlisted" (removed while the watcher was behind:
  the listing no longer has them). presence() answers only while the view is at most
  max_stale seconds old, and None otherwise (and for a key the filter does not cover): the
  caller then asks BatchExists, which stays the authority. A hint can say present for a key
  removed less than max_stale ago (the load then misses and the engine reports it) and
  absent for one stored as recently (the engine recomputes the block).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import errors as E
from .client import Client, Event, _parse_pos

logger = logging.getLogger(__name__)

__all__ = ["Follower", "PresenceHint"]


class Follower:
    """Reads the key event stream on a daemon thread and hands the events to on_batch (see
    the module docstring for the rules). from_pos: the position to resume after (an Event's
    pos); None begins with a listing. interval: the pause between rounds (seconds).
    call_timeout: the deadline of one round. max_batch: events per on_batch call."""

    def __init__(self, client: Client, on_batch: Callable[[List[Event]], None], *,
                 from_pos: Union[None, str, Tuple[int, int]] = None, interval: float = 0.1,
                 call_timeout: float = 30.0, max_batch: int = 4096, name: str = "kvoffload-watch",
                 start: bool = True):
        if interval < 0 or call_timeout <= 0 or max_batch < 1:
            raise E.InvalidArgumentError("Follower: interval >= 0, call_timeout > 0, max_batch >= 1")
        self.client = client
        self._on_batch = on_batch
        self._pos = (0, 0) if from_pos is None else _parse_pos(from_pos)
        self._relist = from_pos is None
        self._interval, self._call_timeout, self._max_batch = interval, call_timeout, max_batch
        self._stop = threading.Event()
        self._cv = threading.Condition()
        self.synced_at = float("-inf")  # time.monotonic() when the last complete round began
        self.rounds = 0
        self.reconnects = 0
        self.delivered = 0
        self.last_error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        if start:
            self._thread.start()

    def start(self) -> None:
        self._thread.start()

    @property
    def position(self) -> str:
        """The position after the last delivered event that a resume would continue from
        ("index.ordinal"; within a listing, the position before it)."""
        return f"{self._pos[0]}.{self._pos[1]}"

    def close(self, timeout: float = 10.0) -> None:
        """Stops the thread (idempotent); waits up to timeout for the current round to end."""
        self._stop.set()
        with self._cv:
            self._cv.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def wait_synced(self, timeout: float = 10.0) -> bool:
        """Waits for a round that began after this call to complete: on True, every change
        committed before the call has been delivered."""
        t = time.monotonic()
        deadline = t + timeout
        with self._cv:
            while self.synced_at < t:
                rem = deadline - time.monotonic()
                if rem <= 0 or self._stop.is_set():
                    return False
                self._cv.wait(rem)
        return True

    def _deliver(self, batch: List[Event]) -> None:
        if not batch:
            return
        try:
            self._on_batch(batch)
        except Exception:  # noqa: BLE001 - a consumer's bug must not stop the stream
            logger.exception("kvoffload: a key-event consumer failed on %d events", len(batch))
        self.delivered += len(batch)

    def _run(self) -> None:
        backoff = 0.05
        while not self._stop.is_set():
            t0 = time.monotonic()
            batch: List[Event] = []
            listing, pending = 0, self._pos
            try:
                for ev in self.client.watch(self._pos, until_now=True, list_keys=self._relist,
                                            timeout=self._call_timeout):
                    if ev.kind == "reset":
                        listing, pending = ev.listed, (ev.index, 0)
                        self._relist = True  # until the listing is whole
                        if not listing:
                            self._pos, self._relist = pending, False
                    elif ev.kind == "listed":
                        listing -= 1
                        if not listing:
                            self._pos, self._relist = pending, False
                    else:
                        self._pos = (ev.index, ev.ordinal)
                    batch.append(ev)
                    if len(batch) >= self._max_batch:
                        self._deliver(batch)
                        batch = []
                    if self._stop.is_set():
                        break
                self._deliver(batch)
                if self._stop.is_set():
                    break
                with self._cv:
                    self.synced_at = t0
                    self.rounds += 1
                    self._cv.notify_all()
                backoff = 0.05
                pause = self._interval
            except E.ClosedError:
                self._deliver(batch)
                break
            except Exception as e:  # noqa: BLE001 - resumed; reported through last_error
                self._deliver(batch)
                self.reconnects += 1
                self.last_error = e
                logger.warning("kvoffload: key event stream interrupted at %s (resuming): %s", self.position, e)
                pause = backoff * (0.75 + random.random() / 2)
                backoff = min(2 * backoff, 2.0)
            self._stop.wait(pause)
        with self._cv:
            self._cv.notify_all()


class PresenceHint:
    """The stored keys under prefix (and passing key_filter), kept by a Follower on client:
    presence(keys) / present(key) answer without a round trip while the view is at most
    max_stale seconds old (see the module docstring). on_change(events), on the watcher's
    thread, receives each change of the view as "stored" / "removed" Events; it may block
    (bounded buffering upstream of it). close() stops the watcher, not the client."""

    def __init__(self, client: Client, *, prefix: str = "", key_filter: Optional[Callable[[str], bool]] = None,
                 max_stale: float = 1.0, interval: float = 0.1, on_change: Optional[Callable[[List[Event]], None]] = None,
                 call_timeout: float = 30.0, name: str = "kvoffload-hint"):
        if max_stale <= 0:
            raise E.InvalidArgumentError("PresenceHint: max_stale must be positive")
        self.prefix = prefix
        self.max_stale = float(max_stale)
        self._filter = key_filter
        self._on_change = on_change
        self._lock = threading.Lock()
        self._keys: Dict[str, Event] = {}
        self._listing: Optional[Dict[str, Event]] = None
        self._listing_left = 0
        self._reset: Optional[Event] = None
        self.answers = 0  # presence() calls answered from the view
        self.follower = Follower(client, self._apply, interval=interval, call_timeout=call_timeout, name=name)

    def covers(self, key: str) -> bool:
        return key.startswith(self.prefix) and (self._filter is None or self._filter(key))

    def age(self) -> float:
        """Seconds since the view was last proven current (inf before the first listing)."""
        return time.monotonic() - self.follower.synced_at

    @property
    def fresh(self) -> bool:
        return not self.follower.closed and self.age() <= self.max_stale

    def presence(self, keys: Sequence[str]) -> Optional[List[bool]]:
        """Per key whether it is stored, or None when the view is older than max_stale or a
        key is outside the prefix / filter (ask BatchExists then)."""
        if not self.fresh or not all(self.covers(k) for k in keys):
            return None
        with self._lock:
            out = [k in self._keys for k in keys]
        self.answers += 1
        return out

    def present(self, key: str) -> Optional[bool]:
        got = self.presence([key])
        return None if got is None else got[0]

    def keys(self) -> List[str]:
        """The keys of the view (a copy)."""
        with self._lock:
            return list(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def wait_synced(self, timeout: float = 10.0) -> bool:
        """Waits until the view holds every change committed before the call."""
        return self.follower.wait_synced(timeout)

    def close(self) -> None:
        self.follower.close()

    def __enter__(self) -> "PresenceHint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _apply(self, events: Iterable[Event]) -> None:
        changes: List[Event] = []
        with self._lock:
            for ev in events:
                if ev.kind == "reset":
                    self._reset, self._listing, self._listing_left = ev, {}, ev.listed
                    if not ev.listed:
                        self._swap(changes)
                elif ev.kind == "listed":
                    if self._listing is None:
                        continue
                    if self.covers(ev.key):
                        self._listing[ev.key] = ev
                    self._listing_left -= 1
                    if self._listing_left <= 0:
                        self._swap(changes)
                elif not self.covers(ev.key):
                    continue
                elif ev.kind == "stored":
                    self._keys[ev.key] = ev
                    changes.append(ev)
                elif ev.kind == "removed":
                    if self._keys.pop(ev.key, None) is not None:
                        changes.append(ev)
        if changes and self._on_change is not None:
            self._on_change(changes)

    def _swap(self, changes: List[Event]) -> None:
        """The listing is whole: it becomes the view; changes gets the difference."""
        new, at = self._listing or {}, self._reset
        for k, old in self._keys.items():
            if k not in new or new[k].generation != old.generation:
                changes.append(old._replace(kind="removed", cause="unlisted", pos=at.pos, index=at.index,
                                            ordinal=0))
        for k, ev in new.items():
            old = self._keys.get(k)
            if old is None or old.generation != ev.generation:
                changes.append(ev._replace(kind="stored"))
        self._keys, self._listing = new, None
