"""Stub of LMCache/LMCache lmcache/v1/storage_backend/__init__.py: storage_plugin_launcher's
loading of storage_plugins from extra_config, as published."""

import importlib
from collections import OrderedDict


def storage_plugin_launcher(config, metadata, loop, local_cpu_backend, dst_device, storage_backends: OrderedDict) -> None:
    storage_plugins = set(config.storage_plugins) if config.storage_plugins else set()
    if not config.extra_config:
        return
    for storage_plugin in storage_plugins:
        module_path = config.extra_config.get(f"storage_plugin.{storage_plugin}.module_path")
        class_name = config.extra_config.get(f"storage_plugin.{storage_plugin}.class_name")
        if not module_path or not class_name:
            continue
        module = importlib.import_module(module_path)
        backend_class = getattr(module, class_name)
        storage_backends[storage_plugin] = backend_class(config=config, dst_device=dst_device, metadata=metadata,
                                                         local_cpu_backend=local_cpu_backend, loop=loop)
