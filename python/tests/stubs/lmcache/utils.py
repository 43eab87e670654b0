"""Stub of LMCache/LMCache lmcache/utils.py: CacheEngineKey (fields and to_string as
published: fmt@model_name@world_size@worker_id@chunk_hash)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class CacheEngineKey:
    fmt: str
    model_name: str
    world_size: int
    worker_id: int
    chunk_hash: int
    dtype: str = "bfloat16"

    def to_string(self) -> str:
        return f"{self.fmt}@{self.model_name}@{self.world_size}@{self.worker_id}@{self.chunk_hash:x}@{self.dtype}"
