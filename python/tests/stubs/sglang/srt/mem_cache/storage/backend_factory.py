"""Stub of sgl-project/sglang python/sglang/srt/mem_cache/storage/backend_factory.py at
001067fffe33427bee0ed2f007fb7551a1d76b44: StorageBackendFactory's registry and its "dynamic"
path as published (create_backend looks in the registry first, then, for "dynamic" with an
extra_config, requires backend_name / module_path / class_name, imports module_path, checks
issubclass(cls, HiCacheStorage) and calls cls(storage_config, kwargs)). The built-in
backends upstream registers (file, mooncake, hf3fs, ...) are not registered here: their
modules are not stubbed."""

import importlib
import logging
from typing import Any, Dict

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

logger = logging.getLogger(__name__)


class StorageBackendFactory:
    _registry: Dict[str, Dict[str, Any]] = {}

    @staticmethod
    def _load_backend_class(module_path: str, class_name: str, backend_name: str) -> type[HiCacheStorage]:
        try:
            module = importlib.import_module(module_path)
            backend_class = getattr(module, class_name)
            if not issubclass(backend_class, HiCacheStorage):
                raise TypeError(f"Backend class {class_name} must inherit from HiCacheStorage")
            return backend_class
        except ImportError as e:
            raise ImportError(f"Failed to import backend '{backend_name}' from '{module_path}': {e}") from e
        except AttributeError as e:
            raise AttributeError(f"Class '{class_name}' not found in module '{module_path}': {e}") from e

    @classmethod
    def register_backend(cls, name: str, module_path: str, class_name: str) -> None:
        def loader() -> type[HiCacheStorage]:
            return cls._load_backend_class(module_path, class_name, name)

        cls._registry[name] = {"loader": loader, "module_path": module_path, "class_name": class_name}

    @classmethod
    def create_backend(cls, backend_name: str, storage_config: HiCacheStorageConfig, mem_pool_host: Any,
                       **kwargs) -> HiCacheStorage:
        if backend_name in cls._registry:
            raise ValueError(f"built-in backend '{backend_name}' is not stubbed")
        if backend_name == "dynamic" and storage_config.extra_config is not None:
            return cls._create_dynamic_backend(storage_config.extra_config, storage_config, mem_pool_host, **kwargs)
        raise ValueError(f"Unknown storage backend '{backend_name}'. Registered backends: {list(cls._registry)}. ")

    @classmethod
    def _create_dynamic_backend(cls, backend_config: Dict[str, Any], storage_config: HiCacheStorageConfig,
                                mem_pool_host: Any, **kwargs) -> HiCacheStorage:
        for field in ["backend_name", "module_path", "class_name"]:
            if field not in backend_config:
                raise ValueError(f"Missing required field '{field}' in backend config for 'dynamic' backend")
        backend_name = backend_config["backend_name"]
        try:
            backend_class = cls._load_backend_class(backend_config["module_path"], backend_config["class_name"],
                                                    backend_name)
            return backend_class(storage_config, kwargs)
        except Exception as e:
            logger.error(f"Failed to create dynamic storage backend '{backend_name}': {e}")
            raise
