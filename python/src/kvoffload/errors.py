"""Errors of a whole call, mirroring the Go sentinels (errors.go at the module root;
docs/api.md "Errors of a whole call, and how to retry"). Per-key problems are never
exceptions: they are results with a Code."""

from __future__ import annotations

from typing import Optional


class KVOffloadError(Exception):
    """Base of every error the client raises. code is the gRPC status code name of the
    member's answer when there was one, reason the member's message (or the client's)."""

    def __init__(self, message: str, *, reason: str = "", grpc_code: Optional[str] = None):
        super().__init__(message)
        self.reason = reason or message
        self.grpc_code = grpc_code


class IndeterminateError(KVOffloadError):
    """ErrIndeterminate: the outcome of a batch_offload is unknown. Call again with the same
    txn ID and the same objects: you get the original results, exactly once."""


class UnavailableError(KVOffloadError):
    """ErrUnavailable: no member answered in time (every call but batch_offload). Retry."""


class InvalidArgumentError(KVOffloadError):
    """ErrInvalidArgument: a malformed request (zero txn ID, a txn ID used for another batch,
    buffer count). Never retry as it is."""


class TooLargeError(KVOffloadError):
    """ErrTooLarge: over MaxBatchKeys or MaxBatchBytes (the message names the limit and its
    value). Split the batch."""


class DeniedError(KVOffloadError):
    """ErrDenied: the credentials were refused (token, certificate)."""


class ClosedError(KVOffloadError):
    """ErrClosed: the client was closed."""


class ProtocolError(KVOffloadError):
    """ErrProtocol: a member's reply broke the protocol. For batch_offload it is raised as an
    IndeterminateError whose __cause__ is the ProtocolError."""


class UnreachableError(KVOffloadError):
    """Client() could not connect to any address (Go client.ErrUnreachable)."""
