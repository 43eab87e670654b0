"""Stub of LMCache/LMCache lmcache/v1/memory_management.py (the newest stored text: the one
with EC_TD and HS_TD and shapes / dtypes per group), the parts a storage plugin meets:

- MemoryFormat, numbered by auto() from UNDEFINED = 0.
- MemoryObjMetadata: shape / dtype (the first group) and shapes / dtypes (every group).
- MemoryObj, the abstract interface; TensorMemoryObj, a flat uint8 tensor viewed as its
  groups: get_size() is sum(numel * itemsize) over the groups, byte_array is a memoryview
  of exactly those bytes, ref_count_down to 0 hands the object back to its allocator.
- MemoryAllocatorInterface, with _adapt_shapes_and_dtypes: a torch.Size becomes [shape] and a
  torch.dtype [dtype], anything else is taken as a list, and the lengths must agree
  ("shapes and dtypes must have the same length, got 4 and 1" for a plain 4-tuple).

The allocator that hands out TensorMemoryObj here is in local_cpu_backend.py (a stand-in
for LMCache's pinned-memory allocators, which need lmcache.c_ops)."""

import abc
import ctypes
import threading
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any, List, Optional, Tuple, Union

import torch


class MemoryFormat(Enum):
    UNDEFINED = 0
    KV_2LTD = auto()  # [2, num_layers, num_tokens, hidden_dim]
    KV_T2D = auto()  # [num_tokens, 2, hidden_dim]
    KV_2TD = auto()  # [2, num_tokens, hidden_dim]
    BINARY = auto()
    BINARY_BUFFER = auto()
    KV_MLA_FMT = auto()  # [1, num_layers, num_tokens, aligned_head_size]
    EC_TD = auto()  # [num_tokens, hidden_dim]
    HS_TD = auto()  # [num_tokens, hidden_dim]

    def token_dim(self) -> int:
        return {MemoryFormat.KV_2LTD: 2, MemoryFormat.KV_T2D: 1, MemoryFormat.KV_MLA_FMT: 2}.get(self, 0)


def itemsize(dtype: torch.dtype) -> int:
    """dtype.itemsize, which torch has from 2.1 (LMCache's torch); Debian's 1.13 has not."""
    return getattr(dtype, "itemsize", None) or torch.empty((), dtype=dtype).element_size()


def get_size_bytes(shapes: List[torch.Size], dtypes: List[torch.dtype]) -> int:
    return sum(s.numel() * itemsize(d) for s, d in zip(shapes, dtypes, strict=True))


@dataclass
class MemoryObjMetadata:
    shape: torch.Size
    dtype: Optional[torch.dtype]
    address: int
    phy_size: int
    ref_count: int
    pin_count: int = 0
    fmt: MemoryFormat = MemoryFormat.UNDEFINED
    cached_positions: Optional[torch.Tensor] = None
    shapes: Optional[List[torch.Size]] = None
    dtypes: Optional[List[torch.dtype]] = None

    def get_size(self) -> int:
        if self.shapes is not None and self.dtypes is not None:
            return get_size_bytes(self.shapes, self.dtypes)
        return self.shape.numel() * itemsize(self.dtype)


class MemoryObj(metaclass=abc.ABCMeta):
    def __init__(self, metadata: MemoryObjMetadata):
        self.meta = metadata

    @abc.abstractmethod
    def invalidate(self): ...

    @abc.abstractmethod
    def is_valid(self): ...

    @abc.abstractmethod
    def get_size(self) -> int: ...

    @abc.abstractmethod
    def get_shape(self) -> torch.Size: ...

    def get_dtype(self) -> Optional[torch.dtype]:
        return None

    @abc.abstractmethod
    def get_shapes(self) -> List[torch.Size]: ...

    @abc.abstractmethod
    def get_dtypes(self) -> List[torch.dtype]: ...

    @abc.abstractmethod
    def get_memory_format(self) -> MemoryFormat: ...

    @abc.abstractmethod
    def get_physical_size(self) -> int: ...

    @abc.abstractmethod
    def pin(self) -> bool: ...

    @abc.abstractmethod
    def ref_count_up(self): ...

    @abc.abstractmethod
    def unpin(self) -> bool: ...

    @abc.abstractmethod
    def ref_count_down(self): ...

    @abc.abstractmethod
    def get_ref_count(self) -> int: ...

    @abc.abstractmethod
    def get_num_tokens(self) -> int: ...

    @property
    @abc.abstractmethod
    def metadata(self) -> MemoryObjMetadata: ...

    @property
    @abc.abstractmethod
    def tensor(self) -> Optional[torch.Tensor]: ...

    @property
    @abc.abstractmethod
    def byte_array(self) -> bytes: ...

    @property
    @abc.abstractmethod
    def data_ptr(self) -> int: ...

    @property
    @abc.abstractmethod
    def is_pinned(self) -> bool: ...

    @property
    @abc.abstractmethod
    def can_evict(self) -> bool: ...

    @property
    @abc.abstractmethod
    def raw_tensor(self) -> Optional[torch.Tensor]: ...

    @abc.abstractmethod
    def get_tensor(self, index: int) -> Optional[torch.Tensor]: ...

    @abc.abstractmethod
    def parent(self) -> Optional["MemoryAllocatorInterface"]: ...


class TensorMemoryObj(MemoryObj):
    def __init__(self, raw_data: torch.Tensor, metadata: MemoryObjMetadata,
                 parent_allocator: Optional["MemoryAllocatorInterface"]):
        assert metadata.dtype is not None, "dtype must be specified for TensorMemoryObj"
        super().__init__(metadata)
        self.raw_data = raw_data
        self.valid = True
        self.lock = threading.Lock()
        self.parent_allocator = parent_allocator
        self.group_prefix_sum = [0]
        if metadata.shapes is not None and metadata.dtypes is not None:
            for s, d in zip(metadata.shapes, metadata.dtypes, strict=True):
                self.group_prefix_sum.append(self.group_prefix_sum[-1] + s.numel() * itemsize(d))
        else:
            self.group_prefix_sum.append(metadata.get_size())

    def invalidate(self):
        self.valid = False

    def is_valid(self):
        return self.valid

    def get_size(self) -> int:
        return self.group_prefix_sum[-1]

    def get_shape(self) -> torch.Size:
        return self.meta.shape

    def get_dtype(self) -> torch.dtype:
        return self.meta.dtype

    def get_shapes(self) -> List[torch.Size]:
        assert self.meta.shapes is not None
        return self.meta.shapes

    def get_dtypes(self) -> List[torch.dtype]:
        assert self.meta.dtypes is not None
        return self.meta.dtypes

    def get_memory_format(self) -> MemoryFormat:
        return self.meta.fmt

    def get_physical_size(self) -> int:
        return self.meta.phy_size

    def ref_count_up(self):
        with self.lock:
            self.meta.ref_count += 1

    def ref_count_down(self):
        with self.lock:
            self.meta.ref_count -= 1
            assert self.meta.ref_count >= 0, "double free of a MemoryObj"
            free = self.meta.ref_count == 0 and self.meta.pin_count == 0 and self.parent_allocator is not None
        if free:
            self.parent_allocator.free(self)

    def get_ref_count(self) -> int:
        with self.lock:
            return self.meta.ref_count

    def get_num_tokens(self) -> int:
        return self.meta.shape[self.meta.fmt.token_dim()]

    def pin(self) -> bool:
        self.meta.pin_count += 1
        return True

    def unpin(self) -> bool:
        self.meta.pin_count -= 1
        return True

    @property
    def metadata(self) -> MemoryObjMetadata:
        return self.meta

    @property
    def tensor(self) -> Optional[torch.Tensor]:
        return self.raw_data[:self.get_size()].view(self.meta.dtype).view(self.meta.shape) if self.valid else None

    @property
    def byte_array(self) -> memoryview:
        n = self.get_size()
        return memoryview((ctypes.c_ubyte * n).from_address(self.raw_data.data_ptr()))

    @property
    def data_ptr(self) -> int:
        return self.raw_data.data_ptr()

    @property
    def is_pinned(self) -> bool:
        return self.meta.pin_count > 0

    @property
    def can_evict(self) -> bool:
        return not self.is_pinned and self.get_ref_count() == 1

    @property
    def raw_tensor(self) -> Optional[torch.Tensor]:
        return self.raw_data if self.valid else None

    def get_tensor(self, index: int) -> Optional[torch.Tensor]:
        b, e = self.group_prefix_sum[index], self.group_prefix_sum[index + 1]
        return self.raw_data[b:e].view(self.meta.dtypes[index]).view(self.meta.shapes[index])

    def parent(self) -> Optional["MemoryAllocatorInterface"]:
        return self.parent_allocator


class MemoryAllocatorInterface(metaclass=abc.ABCMeta):
    @abc.abstractmethod
    def allocate(self, shapes: Union[torch.Size, List[torch.Size]], dtypes: Union[torch.dtype, List[torch.dtype]],
                 fmt: MemoryFormat = MemoryFormat.UNDEFINED, allocator_type: Optional[str] = None
                 ) -> Optional[MemoryObj]: ...

    @abc.abstractmethod
    def batched_allocate(self, shapes: Union[torch.Size, List[torch.Size]],
                         dtypes: Union[torch.dtype, List[torch.dtype]], batch_size: int,
                         fmt: MemoryFormat = MemoryFormat.UNDEFINED, allocator_type: Optional[str] = None
                         ) -> Optional[List[MemoryObj]]: ...

    @abc.abstractmethod
    def free(self, memory_obj: MemoryObj, allocator_type: Optional[str] = None): ...

    @abc.abstractmethod
    def batched_free(self, memory_objs: List[MemoryObj], allocator_type: Optional[str] = None,
                     update_stats: bool = True): ...

    def close(self):
        return

    def memcheck(self) -> bool:
        return True

    def _adapt_shapes_and_dtypes(self, shapes: Union[torch.Size, List[torch.Size]],
                                 dtypes: Union[torch.dtype, List[torch.dtype]]
                                 ) -> Tuple[List[torch.Size], List[torch.dtype]]:
        if isinstance(shapes, torch.Size):
            shapes = [shapes]
        if isinstance(dtypes, torch.dtype):
            dtypes = [dtypes]
        assert len(shapes) == len(dtypes), (
            f"shapes and dtypes must have the same length, got {len(shapes)} and {len(dtypes)}, "
            f"shapes: {shapes}, dtypes: {dtypes}")
        return shapes, dtypes
