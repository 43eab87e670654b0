"""Stub of LMCache/LMCache lmcache/v1/storage_backend/local_cpu_backend.py: LocalCPUBackend
as a storage plugin sees it, the allocator of the objects it reads into:
allocate(shapes, dtypes, fmt=None, eviction=True, busy_loop=True) (fmt None is KV_2LTD
unless layerwise) hands shapes and dtypes to its memory allocator unchanged, so the
allocator's _adapt_shapes_and_dtypes contract applies. The memory allocator here is a
stand-in for LMCache's pinned-memory allocators (they need lmcache.c_ops): a flat uint8
torch tensor per object, 4 KiB-aligned physical size as AddressManager computes it, and a
count of the objects not yet handed back, so a test sees a leaked reference."""

import threading
from typing import List, Optional, Union

import torch

from lmcache.v1.memory_management import (MemoryAllocatorInterface, MemoryFormat, MemoryObj, MemoryObjMetadata,
                                          TensorMemoryObj, get_size_bytes)
from lmcache.v1.storage_backend.abstract_backend import AllocatorBackendInterface

ALIGN_BYTES = 4096


class CountingMemoryAllocator(MemoryAllocatorInterface):
    def __init__(self):
        self.lock = threading.Lock()
        self.live = 0
        self.allocated = 0
        self.next_address = 0

    def allocate(self, shapes, dtypes, fmt=MemoryFormat.UNDEFINED, allocator_type=None) -> Optional[MemoryObj]:
        shapes, dtypes = self._adapt_shapes_and_dtypes(shapes, dtypes)
        size = get_size_bytes(shapes, dtypes)
        aligned = (size + ALIGN_BYTES - 1) // ALIGN_BYTES * ALIGN_BYTES
        with self.lock:
            self.live += 1
            self.allocated += 1
            addr, self.next_address = self.next_address, self.next_address + aligned
        raw = torch.empty(aligned, dtype=torch.uint8)
        return TensorMemoryObj(raw, MemoryObjMetadata(shapes[0], dtypes[0], addr, aligned, 1, 0, fmt,
                                                      shapes=list(shapes), dtypes=list(dtypes)), self)

    def batched_allocate(self, shapes, dtypes, batch_size, fmt=MemoryFormat.UNDEFINED, allocator_type=None):
        return [self.allocate(shapes, dtypes, fmt) for _ in range(batch_size)]

    def free(self, memory_obj, allocator_type=None):
        with self.lock:
            self.live -= 1
        memory_obj.invalidate()

    def batched_free(self, memory_objs, allocator_type=None, update_stats=True):
        for o in memory_objs:
            self.free(o)


class LocalCPUBackend(AllocatorBackendInterface):
    def __init__(self, config=None, metadata=None, dst_device: str = "cuda", lmcache_worker=None,
                 memory_allocator: Optional[MemoryAllocatorInterface] = None):
        super().__init__("cpu")
        self.memory_allocator = memory_allocator or CountingMemoryAllocator()
        self.layerwise = False

    def __str__(self):
        return "LocalCPUBackend"

    def allocate(self, shapes: Union[torch.Size, List[torch.Size]], dtypes: Union[torch.dtype, List[torch.dtype]],
                 fmt: Optional[MemoryFormat] = None, eviction: bool = True, busy_loop: bool = True
                 ) -> Optional[MemoryObj]:
        if fmt is None:
            fmt = MemoryFormat.KV_T2D if self.layerwise else MemoryFormat.KV_2LTD
        return self.memory_allocator.allocate(shapes, dtypes, fmt)

    def batched_allocate(self, shapes, dtypes, batch_size, fmt=None, eviction=True, busy_loop=True):
        if fmt is None:
            fmt = MemoryFormat.KV_2LTD
        return self.memory_allocator.batched_allocate(shapes, dtypes, batch_size, fmt)

    def initialize_allocator(self, config, metadata):
        return self.memory_allocator

    def get_memory_allocator(self):
        return self.memory_allocator

    def get_allocator_backend(self):
        return self

    # The storage interface, unused by a plugin: this stand-in keeps nothing.
    def contains(self, key, pin=False):
        return False

    def exists_in_put_tasks(self, key):
        return False

    def batched_submit_put_task(self, keys, objs, transfer_spec=None, on_complete_callback=None):
        return None

    def get_blocking(self, key):
        return None

    def pin(self, key):
        return False

    def unpin(self, key):
        return False

    def remove(self, key, force=True):
        return False

    def close(self):
        return None
