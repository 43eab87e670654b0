"""Stub of LMCache/LMCache (tests/stubs/README.md): lmcache/__init__.py's torch_device_type,
the device the engine's backends default to ("cuda" on a CUDA build; torch.device accepts
it without a GPU)."""

torch_device_type = "cuda"
