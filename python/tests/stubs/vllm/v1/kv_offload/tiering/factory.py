"""Stub of vllm-project/vllm vllm/v1/kv_offload/tiering/factory.py, current (the newest stored
text): SecondaryTierFactory with register_tier, create_secondary_tier(tier_config,
primary_kv_view, offloading_spec) -> tier_cls(offloading_spec=, primary_kv_view=, tier_type=,
**config without "type" and "module_path"), and get_tier_class: a registered "type", or an
out-of-tree class named by "type" in the module "module_path". The built-in tiers
(example, fs, p2p, obj) are not registered here."""

import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from vllm.v1.kv_offload.tiering.base import SecondaryTierManager

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import OffloadingSpec

logger = logging.getLogger("vllm.v1.kv_offload.tiering.factory")


class SecondaryTierFactory:
    _registry: "dict[str, Callable[[], type[SecondaryTierManager]]]" = {}

    @classmethod
    def register_tier(cls, tier_type: str, module_path: str, class_name: str) -> None:
        if tier_type in cls._registry:
            raise ValueError(f"Tier '{tier_type}' is already registered.")

        def loader() -> "type[SecondaryTierManager]":
            return getattr(importlib.import_module(module_path), class_name)

        cls._registry[tier_type] = loader

    @classmethod
    def create_secondary_tier(cls, tier_config: dict, primary_kv_view: memoryview,
                              offloading_spec: "OffloadingSpec") -> SecondaryTierManager:
        tier_cls = cls.get_tier_class(tier_config)
        config = tier_config.copy()
        tier_type = config.pop("type")
        config.pop("module_path", None)
        return tier_cls(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view, tier_type=tier_type,
                        **config)

    @classmethod
    def get_tier_class(cls, tier_config: dict) -> "type[SecondaryTierManager]":
        tier_type = tier_config.get("type")
        if not tier_type:
            raise ValueError("Secondary tier configuration must include 'type'")
        if tier_type in cls._registry:
            return cls._registry[tier_type]()
        module_path = tier_config.get("module_path")
        if module_path is None:
            raise ValueError(f"Unknown secondary tier type: {tier_type!r}. Supported types: {list(cls._registry)}. "
                             "For an out-of-tree tier, also set 'module_path'.")
        logger.info("Loading out-of-tree secondary tier '%s' from '%s'.", tier_type, module_path)
        tier_cls = getattr(importlib.import_module(module_path), tier_type)
        assert issubclass(tier_cls, SecondaryTierManager)
        return tier_cls
