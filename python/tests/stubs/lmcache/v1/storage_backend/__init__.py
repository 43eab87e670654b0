"""Stub of LMCache/LMCache lmcache/v1/storage_backend/__init__.py: storage_plugin_launcher as
the newest stored text has it (one instance per name in set(config.storage_plugins), made
with config=, dst_device=, metadata=, local_cpu_backend=, loop=; a missing module_path /
class_name is a warning and an exception from the constructor an error log, the engine
going on without that plugin)."""

import importlib
import logging
from collections import OrderedDict

logger = logging.getLogger("lmcache.v1.storage_backend")


def storage_plugin_launcher(config, metadata, loop, local_cpu_backend, dst_device, storage_backends: OrderedDict) -> None:
    storage_plugins = set(config.storage_plugins) if config.storage_plugins else set()
    if storage_plugins and not config.extra_config:
        logger.warning("storage_plugins=%s is set but extra_config is empty; plugin settings must be provided "
                       "under extra_config, e.g. extra_config.storage_plugin.<name>.module_path/class_name",
                       sorted(storage_plugins))
        return
    if not config.extra_config:
        return
    for storage_plugin in storage_plugins:
        try:
            module_path = config.extra_config.get(f"storage_plugin.{storage_plugin}.module_path")
            class_name = config.extra_config.get(f"storage_plugin.{storage_plugin}.class_name")
            if not module_path or not class_name:
                logger.warning(f"Backend {storage_plugin} missing module_path or class_name")
                continue
            module = importlib.import_module(module_path)
            backend_class = getattr(module, class_name)
            backend_instance = backend_class(config=config, dst_device=dst_device, metadata=metadata,
                                             local_cpu_backend=local_cpu_backend, loop=loop)
            storage_backends[storage_plugin] = backend_instance
            logger.info(f"Created dynamic backend: {storage_plugin}")
        except Exception as e:
            logger.error(f"Failed to create backend {storage_plugin}: {str(e)}")
