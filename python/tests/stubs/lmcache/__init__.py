"""Stub of LMCache/LMCache (tests/stubs/README.md)."""
