"""What the engine backends share: buffers from tensors, arrays and raw pointers without a
copy, and a Client from an engine's configuration dictionary."""

from __future__ import annotations

import ctypes
from typing import Any, Mapping, Optional

from .client import Client


def view_of(x: Any) -> memoryview:
    """A flat byte memoryview of x's memory, no copy: torch tensors (contiguous, CPU: through
    data_ptr()), numpy arrays, bytearray, memoryview, bytes (read-only)."""
    if isinstance(x, memoryview):
        mv = x
    elif hasattr(x, "data_ptr") and hasattr(x, "element_size") and hasattr(x, "numel"):
        if hasattr(x, "is_contiguous") and not x.is_contiguous():
            raise ValueError("tensor is not contiguous")
        return ptr_view(x.data_ptr(), x.numel() * x.element_size())
    else:
        mv = memoryview(x)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def ptr_view(ptr: int, nbytes: int) -> memoryview:
    """A writable memoryview of nbytes at address ptr (host memory the engine owns and
    keeps alive for the call: SGLang's get_page_buffer_meta pointers)."""
    return memoryview((ctypes.c_char * nbytes).from_address(ptr)).cast("B")


def client_from(cfg: Mapping[str, Any], prefix: str = "") -> Client:
    """Client from cfg[prefix + name] for name in addrs (list, or comma-separated host:port,
    or unix:///PATH for a node's --local-socket on this host: the shared-memory path),
    timeout (s), token, token_file, tls_ca (a PEM file: TLS to the API), insecure_token, local
    (Client's local: unset = auto, true = require the shared-memory path, false = never)."""

    def get(name: str, default: Optional[Any] = None) -> Any:
        return cfg.get(prefix + name, default)

    addrs = get("addrs") or "127.0.0.1:7100"
    if isinstance(addrs, str):
        addrs = [a.strip() for a in addrs.split(",") if a.strip()]
    token = get("token")
    if get("token_file"):
        with open(get("token_file")) as f:
            token = f.read().strip()
    tls = None
    if get("tls_ca"):
        with open(get("tls_ca"), "rb") as f:
            tls = f.read()
    local = get("local")
    if isinstance(local, str):
        local = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(local.lower())
    return Client(addrs, timeout=float(get("timeout", 30.0)), token=token, tls=tls,
                  insecure_token=bool(get("insecure_token", False)), local=local)
