"""The local shared-memory path (docs/design.md "The local path"): on a node's --local-socket
(a client address "unix:///PATH"), values move through a memfd the client registers once,
and LocalKVOffload.Offload / Get carry descriptors (key, offset, length) into it.

The registration protocol is the Go client's (client/region.go), made on another
connection to the same socket; node/local_listen.go, the server, specifies its bytes (the
memfd goes as SCM_RIGHTS with the register message). The memfd is sealed with F_SEAL_SHRINK (the node refuses one that could
be truncated under its mapping, node/local_region.go checkMemfd). A region lives while its
registration connection is open, and only this process (the node checks SO_PEERCRED uid and
pid, docs/security.md) holding its token can name it.
"""

from __future__ import annotations

import array
import errno
import fcntl
import mmap
import os
import socket
import struct
import threading
from typing import List, Optional

from . import errors as E

_REGISTER = b"KVR1"
_UNREGISTER = b"KVU1"
# fcntl(2) seals (linux/fcntl.h); the fcntl module has them on Linux from Python 3.8.
F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1033)
F_SEAL_SEAL = getattr(fcntl, "F_SEAL_SEAL", 0x0001)
F_SEAL_SHRINK = getattr(fcntl, "F_SEAL_SHRINK", 0x0002)
F_SEAL_GROW = getattr(fcntl, "F_SEAL_GROW", 0x0004)
# Staging regions are rounded up to this, so that batches of similar sizes share them
# (client/region.go stagingQuantum).
STAGING_QUANTUM = 16 << 20
# The largest staging region of one call (client/local.go maxStagingBytes).
MAX_STAGING_BYTES = 1 << 30


def local_path(addr: str) -> str:
    """The socket path of a "unix://PATH" or "unix:PATH" address, or "" (client/region.go
    localPath). "unix:///tmp/s" is the path /tmp/s."""
    if addr.startswith("unix://"):
        return addr[len("unix://"):]
    if addr.startswith("unix:"):
        return addr[len("unix:"):]
    return ""


class _Refused(Exception):
    """A refusal the node answered on the registration connection (the connection is fine)."""


class Region:
    """A shared-memory region registered with a node on its local socket: fill buf in place
    and offload ranges of it with Client.offload_from, or read values into it with
    Client.get_into_region (the zero-copy path; Go client.Region, client/region.go). It stays
    registered until close() or the client's close(); when the node drops the registration
    (it restarted), the next call naming the region registers the same memory again, under a
    new ID, and goes on (Go client.Region). Only the process that registered it may use it
    (docs/security.md)."""

    def __init__(self, reg: "_Registrar", rid: bytes, token: bytes, mm: mmap.mmap, size: int,
                 fd: int = -1):
        self._reg = reg
        self.id = rid
        self._token = token
        self._mm = mm
        self.size = size
        self.buf = memoryview(mm)  # writable, len = size
        self._closed = False
        self._lock = threading.Lock()
        self._gen = 0  # the registration connection's generation (_Registrar.gen)
        self._fd = fd  # the memfd, kept to register it again (renew); -1: not kept, or closed
        self._pid = os.getpid()  # a forked child shares the registrar's socket: it never renews

    def renew(self, stale: bytes) -> bool:
        """Registers the region's memfd again after the node refused stale, the ID a call
        named (a restart broke the registration connection). Callers that saw the same
        refusal renew once between them. False when the region cannot be renewed (closed, the
        node refused, or this is a forked child of the registering process, which the node
        refuses the region to and which must not register on its parent's connection)."""
        with self._lock:
            if self.id != stale:
                return True
            if self._closed or self._fd < 0 or os.getpid() != self._pid:
                return False
            try:
                self.id, self._token, self._gen = self._reg.register_fd(self._fd, self.size)
            except E.KVOffloadError:
                return False
            return True

    @property
    def closed(self) -> bool:
        return self._closed

    def ref(self):
        from .v1 import kvoffload_pb2 as pb

        return pb.RegionRef(id=self.id, token=self._token)

    def close(self) -> None:
        """Unregisters the region (the node refuses new calls on it at once, and unmaps it once
        the calls reading it end) and unmaps it here once
        no memoryview of buf is held any more. The memory must not be used afterwards."""
        with self._lock:
            if self._closed:
                return
            self._closed = True  # first: a call meeting the unregistered ID must not renew it
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        try:
            self._reg.unregister(self)
        finally:
            self._unmap()

    def _unmap(self) -> None:
        self.buf.release()
        try:
            self._mm.close()
        except BufferError:
            pass  # a caller still holds a view of buf: the mapping goes when it is dropped

    def __enter__(self) -> "Region":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Region(id={self.id.hex()}, size={self.size}{', closed' if self._closed else ''})"


class _Registrar:
    """A member's registration connection: dialed on first use and again after it broke
    (its regions are then gone on the node)."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self.gen = 0  # bumped when the connection is dropped: the regions of older ones are gone

    def register(self, size: int, keep: bool = False) -> Region:
        """A sealed memfd of size bytes, mapped and registered; with keep, the region keeps
        its memfd open to register it again after a node restart (Region.renew). Raises InvalidArgumentError
        (size, or the node refused the memfd), TooLargeError (a node limit, named by the
        node's message: MaxRegionBytes, MaxRegionsPerConn, MaxRegions, MaxMappedBytes),
        UnavailableError (the socket cannot be reached or the connection broke)."""
        if size <= 0:
            raise E.InvalidArgumentError(f"region size {size} must be positive")
        fd = os.memfd_create("kvoffload-region", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            try:
                os.ftruncate(fd, size)
                fcntl.fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
                mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            except OSError as e:
                raise E.UnavailableError(f"client: making a region of {size} bytes: {e}") from e
            try:
                rid, token, gen = self.register_fd(fd, size)
            except BaseException:
                mm.close()
                raise
        except BaseException:
            os.close(fd)
            raise
        if not keep:
            os.close(fd)  # the mapping and the node's copy keep the memfd alive
            fd = -1
        r = Region(self, rid, token, mm, size, fd)
        r._gen = gen
        return r

    def register_fd(self, fd: int, size: int):
        """Registers size bytes of the memfd fd: (region ID, token, the generation of the
        connection holding it). A connection a node restart broke fails the first exchange
        (and is dropped); the registration is then sent once more on a fresh connection."""
        msg = _REGISTER + struct.pack("<Q", size)
        try:
            reply, gen = self._call(msg, fd, 32)
        except E.UnavailableError:
            reply, gen = self._call(msg, fd, 32)
        return reply[:16], reply[16:], gen

    def unregister(self, r: Region) -> None:
        if r._reg is not self or r._gen != self.gen:
            return  # its connection is gone, and with it the registration
        try:
            self._call(_UNREGISTER + r.id, None, 0, dial=False)
        except E.KVOffloadError:
            pass  # the connection broke: the node dropped every region of it already

    def _call(self, msg: bytes, fd: Optional[int], want: int, dial: bool = True):
        """(the answer's want bytes, the connection's generation)."""
        with self._lock:
            if self._sock is None:
                if not dial:
                    return b"", self.gen
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(self.path)
                except OSError as e:
                    s.close()
                    raise E.UnavailableError(f"client: local socket {self.path}: {e}", reason=str(e)) from e
                self._sock = s
            try:
                return self._exchange(msg, fd, want), self.gen
            except _Refused as e:
                text = str(e)
                if "Max" in text:
                    raise E.TooLargeError(f"client: the node refused the region: {text}", reason=text) from None
                raise E.InvalidArgumentError(f"client: the node refused the region: {text}", reason=text) from None
            except OSError as e:
                self._drop()
                raise E.UnavailableError(f"client: registration on {self.path}: {e}", reason=str(e)) from e

    def _exchange(self, msg: bytes, fd: Optional[int], want: int) -> bytes:
        s = self._sock
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))] if fd is not None else []
        s.sendmsg([msg], anc)
        st = self._read(1)
        if st == b"\x00":
            return self._read(want)
        (n,) = struct.unpack("<H", self._read(2))
        raise _Refused(self._read(n).decode("utf-8", "replace"))

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            b = self._sock.recv(n - len(out))
            if not b:
                raise OSError(errno.ECONNRESET, "the node closed the registration connection")
            out += b
        return bytes(out)

    def _drop(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
            self.gen += 1

    def close(self) -> None:
        with self._lock:
            self._drop()


class _Staging:
    """A member's pool of regions that batch_offload / batch_get copy through
    (client/region.go staging). A region whose call failed is never put back: it is
    unregistered (the node finishes any read of it in flight on its own mapping)."""

    def __init__(self, reg: _Registrar):
        self.reg = reg
        self._lock = threading.Lock()
        self._free: List[Region] = []
        self._closed = False

    def get(self, size: int) -> Region:
        with self._lock:
            best = -1
            for i, r in enumerate(self._free):
                if r.size >= size and (best < 0 or r.size < self._free[best].size):
                    best = i
            if best >= 0:
                return self._free.pop(best)
        return self.reg.register((max(size, 1) + STAGING_QUANTUM - 1) // STAGING_QUANTUM * STAGING_QUANTUM)

    def put(self, r: Region, failed: bool) -> None:
        with self._lock:
            if not failed and not self._closed and r._gen == self.reg.gen:
                self._free.append(r)
                return
        r.close()

    def lost(self, r: Region) -> None:
        """The node does not know r: if r's registration connection is still this one, the
        node dropped it (a restart), so drop it too, and with it every pooled region."""
        with self._lock:
            stale = [f for f in self._free if f._gen == r._gen]
            self._free = [f for f in self._free if f._gen != r._gen]
        for f in stale:
            f._closed = True
            f._unmap()
        with self.reg._lock:
            if self.reg.gen == r._gen:
                self.reg._drop()

    def close(self) -> None:
        with self._lock:
            free, self._free, self._closed = self._free, [], True
        for r in free:
            r._closed = True
            r._unmap()
        self.reg.close()
