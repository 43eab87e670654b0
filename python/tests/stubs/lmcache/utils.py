"""Stub of LMCache/LMCache lmcache/utils.py: CacheEngineKey as the newest stored text has it
(no fmt field since v0.4: model_name, world_size, worker_id, chunk_hash, dtype,
request_configs; to_string "model@world_size@worker_id@<chunk_hash hex>@<dtype>"), the only
part of the key a storage plugin uses being to_string()."""

from dataclasses import dataclass
from typing import Optional

import torch

_DTYPE_STR = {torch.float16: "half", torch.bfloat16: "bfloat16", torch.float32: "float", torch.float64: "double",
              torch.uint8: "fp8"}


@dataclass(frozen=True)
class CacheEngineKey:
    model_name: str
    world_size: int
    worker_id: int
    chunk_hash: int
    dtype: torch.dtype = torch.bfloat16
    request_configs: Optional[tuple] = None

    def to_string(self) -> str:
        s = f"{self.model_name}@{self.world_size}@{self.worker_id}@{self.chunk_hash:x}@{_DTYPE_STR[self.dtype]}"
        if self.request_configs:
            s += "@" + "@".join(f"{k}%{v}" for k, v in self.request_configs)
        return s
