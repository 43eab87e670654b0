"""Stub of vllm-project/vllm vllm/v1/kv_offload/tiering/factory.py@0411f953de014cc29c91aa7060d66f603bde6a54:
SecondaryTierFactory.create_secondary_tier(tier_config, primary_kv_view, vllm_config) ->
tier_cls(vllm_config=, primary_kv_view=, tier_type=, **config) of a registered "type" (no
out-of-tree module_path yet)."""

import importlib
from collections.abc import Callable

from vllm.v1.kv_offload.tiering.base import SecondaryTierManager


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
                              vllm_config: "VllmConfig") -> SecondaryTierManager:
        config = tier_config.copy()
        tier_type = config.pop("type", None)
        if not tier_type:
            raise ValueError("Secondary tier configuration must include 'type'")
        if tier_type not in cls._registry:
            raise ValueError(f"Unknown secondary tier type: {tier_type!r}. Supported types: {list(cls._registry)}")
        tier_cls = cls._registry[tier_type]()
        return tier_cls(vllm_config=vllm_config, primary_kv_view=primary_kv_view, tier_type=tier_type, **config)
