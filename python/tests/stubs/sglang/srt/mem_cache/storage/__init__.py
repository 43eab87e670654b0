"""Stub of sgl-project/sglang python/sglang/srt/mem_cache/storage/__init__.py: the cache
controller imports the factory from here (managers/cache_controller.py attach_storage_backend)."""

from .backend_factory import StorageBackendFactory

__all__ = ["StorageBackendFactory"]
