"""Publishes the store's key events as vLLM KV events (BlockStored / BlockRemoved /
AllBlocksCleared, msgpack over a ZMQ PUB socket), so a KV-aware router that consumes vLLM's
own events consumes the SSD tier the same way (issue 32).

    python3 -m kvoffload.events --addr HOST:PORT[,HOST:PORT...] [--zmq tcp://127.0.0.1:5557] \\
        [--bind] [--replay tcp://127.0.0.1:5558] [--topic T] [--namespace NS] [--medium STORAGE] ...

Upstream read: vllm-project/vllm vllm/distributed/kv_events.py at
0181ea3173e53eea8cf04a86891488e3dc89bb34 (KVEventBatch(ts, events, data_parallel_rank=None);
BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
lora_name, extra_keys=None, group_idx=None, kv_cache_spec_kind=None,
kv_cache_spec_sliding_window=None); BlockRemoved(block_hashes, medium, group_idx=None);
AllBlocksCleared(); msgspec structs with omit_defaults and tag=True; ZmqEventPublisher sends
multipart (topic, 8-byte big-endian sequence from 0, payload) and, on its ROUTER replay
socket, answers a request (identity, b"", start seq) with (identity, b"", seq, payload) per
buffered batch from start, then (identity, b"", -1 as 8 signed bytes, b"")); and at
b4e69e0af33f4698e157a262cc787fe61983cd3d, the earlier layout: array_like=True structs,
positional arrays with the tag first. vllm/v1/core/kv_cache_utils.py
maybe_convert_block_hash: bytes hashes, or the low 64 bits big-endian as an int under
VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES.

Rules and invariants:

- Keys: a store key "<prefix><hex of an OffloadKey>" (the vLLM tier's keys: prefix
  "vllm/<namespace>/", or "vllm/" without a namespace; an OffloadKey is the block hash and
  its group index as 4 big-endian bytes) is published as that block hash with its
  group_idx; every other key (other namespaces, other engines) is skipped and counted.
  key_to_block replaces the rule from Python.
- Batches: each batch of the stream (hint.Follower's, at most max_batch events) becomes one
  KVEventBatch, in stream order; consecutive changes of one kind and group are one
  BlockStored / BlockRemoved with their hashes in order. A stored key is a BlockStored with
  parent_block_hash None, token_ids [] and block_size (the store knows neither the tokens
  nor the parent), lora_id / lora_name None; every removal cause (removed, evicted,
  owner_left, pruned) is a BlockRemoved. Both carry medium (default "STORAGE", vLLM's
  Medium.STORAGE).
- Resynchronisation: a reset of the stream (the publisher starting without --from, or a
  window passed) is published as AllBlocksCleared then a BlockStored per listed key: a
  subscriber drops what it knew of this publisher and relearns the whole state. A watcher
  reconnect resumes after the last published event: nothing is repeated or skipped.
- Framing: (topic, seq, payload) as ZmqEventPublisher, seq counting batches from 0 in this
  process; data_parallel_rank is set on every batch (the publisher's rank).
- Endpoints: without an endpoint the PUB socket binds DEFAULT_ENDPOINT (tcp://127.0.0.1:5557,
  this host only); a given endpoint is bound when it has "*", "::", ipc:// or inproc:// (or
  bind=True, --bind), else connected, as vLLM's publisher. Binding a wildcard address
  (*, 0.0.0.0, ::) logs a warning: the events name every stored block to anyone who can
  reach the port.
- Replay: only with a replay socket are batches kept, the last replay_batches of them and at
  most replay_bytes (default REPLAY_BYTES, 64 MiB) of payload, the oldest dropped first;
  without one nothing is kept. The replay socket is used only by its thread, which closes
  it; close() stops that thread and waits for it.
- Layouts: "map" (the read commit: the batch and its events are maps, the tag under "type",
  defaults omitted), "array" (before vLLM #42892: positional arrays, the tag first, trailing
  defaults omitted), "mixed" (a positional batch of map events, as vLLM 0.26 was seen to
  send in volcano-sh/kthena#1535).
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import threading
import time
from collections import deque
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .client import Client, Event
from .hint import Follower

logger = logging.getLogger(__name__)

__all__ = ["KVEventPublisher", "vllm_key_to_block", "encode_batch", "LAYOUTS", "DEFAULT_ENDPOINT", "REPLAY_BYTES", "main"]

LAYOUTS = ("map", "array", "mixed")
END_SEQ = (-1).to_bytes(8, "big", signed=True)
DEFAULT_ENDPOINT = "tcp://127.0.0.1:5557"
REPLAY_BYTES = 64 << 20
_WILDCARD = re.compile(r"tcp://(?:\*|0\.0\.0\.0|::|\[::\]|\[\*\]):")
_HEX = re.compile(r"(?:[0-9a-f]{2}){5,}")

BlockRef = Tuple[Union[bytes, int], Optional[int]]  # (external block hash, group_idx)


def vllm_key_to_block(prefix: str = "vllm/", int_hashes: bool = False) -> Callable[[str], Optional[BlockRef]]:
    """The rule Keys: "<prefix><hex of an OffloadKey>" -> (block hash, group index), None for
    any other key. int_hashes: the hash as vLLM's maybe_convert_block_hash makes it under
    VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES (its low 64 bits, big-endian)."""

    def conv(key: str) -> Optional[BlockRef]:
        if not key.startswith(prefix) or _HEX.fullmatch(key, len(prefix)) is None:
            return None
        raw = bytes.fromhex(key[len(prefix):])
        h, group = raw[:-4], int.from_bytes(raw[-4:], "big")
        return (int.from_bytes(h, "big") & ((1 << 64) - 1) if int_hashes else h), group

    return conv


def _event(kind: str, hashes: List[Any], group: Optional[int], medium: Optional[str], block_size: int,
           layout: str) -> Any:
    if kind == "BlockStored":
        fields: List[Tuple[str, Any, bool]] = [  # (name, value, has a default)
            ("block_hashes", hashes, False), ("parent_block_hash", None, False), ("token_ids", [], False),
            ("block_size", block_size, False), ("lora_id", None, False), ("medium", medium, False),
            ("lora_name", None, False), ("extra_keys", None, True), ("group_idx", group, True)]
    elif kind == "BlockRemoved":
        fields = [("block_hashes", hashes, False), ("medium", medium, False), ("group_idx", group, True)]
    else:
        fields = []
    if layout == "array":
        while fields and fields[-1][2] and fields[-1][1] is None:  # omit_defaults trims trailing defaults
            fields.pop()
        return [kind] + [v for _, v, _ in fields]
    out = {"type": kind}
    out.update((n, v) for n, v, d in fields if not (d and v is None))
    return out


def encode_batch(ts: float, events: List[Any], dp_rank: Optional[int], layout: str) -> bytes:
    """One KVEventBatch payload (events already in the layout's event form)."""
    import msgpack

    if layout == "map":
        batch: Any = {"ts": ts, "events": events}
        if dp_rank is not None:
            batch["data_parallel_rank"] = dp_rank
    else:
        batch = [ts, events] + ([dp_rank] if dp_rank is not None else [])
    return msgpack.packb(batch, use_bin_type=True)


def _warn_wildcard(endpoint: str) -> None:
    if _WILDCARD.match(endpoint):
        logger.warning("kvoffload.events: binding %s, every interface: anyone who reaches it reads every "
                       "stored block's hash; bind 127.0.0.1 or a private address unless that is meant", endpoint)


class KVEventPublisher:
    """Follows client's key event stream (hint.Follower) and publishes it on a ZMQ PUB socket
    at endpoint (None: DEFAULT_ENDPOINT, bound; otherwise bound when it has "*", "::", ipc://
    or inproc:// or bind is True, else connected, as vLLM's publisher), with an optional ROUTER
    replay socket keeping at most replay_batches batches and replay_bytes bytes (REPLAY_BYTES,
    64 MiB); see the module docstring for the rules.
    from_pos resumes after an event's position (None: a reset and the whole state first)."""

    def __init__(self, client: Client, endpoint: Optional[str] = None, *, replay_endpoint: Optional[str] = None,
                 topic: str = "", medium: Optional[str] = "STORAGE", block_size: int = 16,
                 namespace: Optional[str] = None, key_to_block: Optional[Callable[[str], Optional[BlockRef]]] = None,
                 int_hashes: bool = False, layout: str = "map", data_parallel_rank: int = 0,
                 replay_batches: int = 10_000, replay_bytes: int = REPLAY_BYTES, hwm: int = 100_000,
                 from_pos: Optional[str] = None, interval: float = 0.1, max_batch: int = 4096,
                 bind: Optional[bool] = None):
        import zmq

        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r}: one of {', '.join(LAYOUTS)}")
        prefix = f"vllm/{namespace}/" if namespace else "vllm/"
        self._conv = key_to_block or vllm_key_to_block(prefix, int_hashes)
        self._medium, self._block_size, self._layout, self._rank = medium, int(block_size), layout, data_parallel_rank
        self._topic = topic.encode()
        self._ctx = zmq.Context.instance()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(hwm)
        if endpoint is None:
            endpoint, bind = DEFAULT_ENDPOINT, True
        if bind is None:
            bind = "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))
        self.endpoint, self.bound = endpoint, bool(bind)
        if bind:
            _warn_wildcard(endpoint)
            self._pub.bind(endpoint)
        else:
            self._pub.connect(endpoint)
        self._replay = None
        if replay_endpoint:
            self._replay = self._ctx.socket(zmq.ROUTER)
            _warn_wildcard(replay_endpoint)
            self._replay.bind(replay_endpoint)
        self._buffer: deque = deque()  # (seq, payload), only with a replay socket
        self._buffer_bytes = 0
        self._replay_batches, self._replay_bytes = int(replay_batches), int(replay_bytes)
        self._seq = 0
        self._lock = threading.Lock()  # ZMQ sockets are not thread-safe: one sender at a time
        self.stats = dict(batches=0, stored=0, removed=0, cleared=0, skipped=0)
        self._closed = False
        self._replayer = None
        if self._replay is not None:
            self._replayer = threading.Thread(target=self._serve_replay, name="kvoffload-events-replay", daemon=True)
            self._replayer.start()
        self.follower = Follower(client, self._publish, from_pos=from_pos, interval=interval, max_batch=max_batch,
                                 name="kvoffload-events")

    @property
    def position(self) -> str:
        """The stream position after the last published event (what --from resumes after)."""
        return self.follower.position

    def _events(self, batch: Sequence[Event]) -> List[Any]:
        out: List[Any] = []
        run: Optional[Tuple[str, Optional[int], List[Any]]] = None
        for ev in batch:
            if ev.kind == "reset":
                run = None
                out.append(_event("AllBlocksCleared", [], None, None, 0, self._layout))
                self.stats["cleared"] += 1
                continue
            ref = self._conv(ev.key)
            if ref is None:
                self.stats["skipped"] += 1
                continue
            kind = "BlockRemoved" if ev.kind == "removed" else "BlockStored"
            self.stats["removed" if ev.kind == "removed" else "stored"] += 1
            if run is not None and run[0] == kind and run[1] == ref[1]:
                run[2].append(ref[0])
                continue
            run = (kind, ref[1], [ref[0]])
            out.append(run)
        return [e if not isinstance(e, tuple) else
                _event(e[0], e[2], e[1], self._medium, self._block_size, self._layout) for e in out]

    def _publish(self, batch: List[Event]) -> None:
        events = self._events(batch)
        if not events:
            return
        payload = encode_batch(time.time(), events, self._rank, "map" if self._layout == "map" else "array")
        with self._lock:
            seq = self._seq
            self._seq += 1
            self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
            if self._replay is not None:
                self._buffer.append((seq, payload))
                self._buffer_bytes += len(payload)
                while self._buffer and (len(self._buffer) > self._replay_batches
                                        or self._buffer_bytes > self._replay_bytes):
                    self._buffer_bytes -= len(self._buffer.popleft()[1])
            self.stats["batches"] += 1

    def _serve_replay(self) -> None:
        """The replay socket's only user: answers requests until close(), then closes it."""
        import zmq

        try:
            self._replay_loop(zmq)
        finally:
            self._replay.close(linger=0)

    def _replay_loop(self, zmq: Any) -> None:
        poller = zmq.Poller()
        poller.register(self._replay, zmq.POLLIN)
        while not self._closed:
            if not poller.poll(100):
                continue
            try:
                frame = self._replay.recv_multipart()
                if len(frame) != 3:
                    logger.warning("kvoffload.events: a replay request of %d frames", len(frame))
                    continue
                ident, _, start = frame
                start_seq = int.from_bytes(start, "big")
                with self._lock:
                    todo = [(s, p) for s, p in self._buffer if s >= start_seq]
                for s, p in todo:
                    if self._closed:
                        return
                    self._replay.send_multipart((ident, b"", s.to_bytes(8, "big"), p))
                self._replay.send_multipart((ident, b"", END_SEQ, b""))
            except zmq.ZMQError as e:
                if not self._closed:
                    logger.warning("kvoffload.events: replay: %s", e)

    def close(self) -> None:
        """Stops the watcher and closes the sockets (not the client). The replay thread is
        stopped and waited for before its socket is closed (by that thread: ZMQ sockets are
        not thread-safe); close() never touches the replay socket itself."""
        self.follower.close()
        self._closed = True
        if self._replayer is not None:
            self._replayer.join()
        with self._lock:
            self._pub.close(linger=0)
            self._buffer.clear()
            self._buffer_bytes = 0

    def __enter__(self) -> "KVEventPublisher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    from . import _engine

    ap = argparse.ArgumentParser(prog="python3 -m kvoffload.events", description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", required=True, help="members' API addresses, host:port[,host:port...]")
    ap.add_argument("--zmq", default=None,
                    help=f"PUB endpoint (vLLM's kv-events endpoint form; default {DEFAULT_ENDPOINT}, bound)")
    ap.add_argument("--bind", action="store_true", default=None,
                    help="bind --zmq even without * or :: (default: as vLLM, bind those, connect others)")
    ap.add_argument("--replay", default=None, help="ROUTER replay endpoint (optional)")
    ap.add_argument("--topic", default="")
    ap.add_argument("--namespace", default=None, help="the vLLM tier's namespace option")
    ap.add_argument("--medium", default="STORAGE")
    ap.add_argument("--block-size", type=int, default=16, help="tokens per block, as vLLM's --block-size")
    ap.add_argument("--int-hashes", action="store_true", help="as VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1")
    ap.add_argument("--layout", choices=LAYOUTS, default="map")
    ap.add_argument("--data-parallel-rank", type=int, default=0)
    ap.add_argument("--from", dest="from_pos", default=None, help="resume after this position (index.ordinal)")
    ap.add_argument("--token-file", default=None)
    ap.add_argument("--tls-ca", default=None)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    client = _engine.client_from({"addrs": a.addr, "token_file": a.token_file, "tls_ca": a.tls_ca})
    pub = KVEventPublisher(client, a.zmq, bind=a.bind, replay_endpoint=a.replay, topic=a.topic, medium=a.medium,
                           block_size=a.block_size, namespace=a.namespace, int_hashes=a.int_hashes, layout=a.layout,
                           data_parallel_rank=a.data_parallel_rank, from_pos=a.from_pos)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    logger.info("publishing the key events of %s on %s (%s)", a.addr, pub.endpoint, "bound" if pub.bound else "connected")
    while not done.wait(10):
        logger.info("position %s, %s", pub.position, pub.stats)
    pub.close()
    client.close()
    print(pub.position)  # a restart resumes with --from this
    return 0


if __name__ == "__main__":
    sys.exit(main())
