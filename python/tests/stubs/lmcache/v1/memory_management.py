"""Stub of LMCache/LMCache lmcache/v1/memory_management.py: MemoryFormat and the MemoryObj
methods the plugin uses (get_shape, get_dtype, get_memory_format, byte_array, ref counts)."""

import abc
import enum


class MemoryFormat(enum.Enum):
    UNDEFINED = 0
    KV_2LTD = 1
    KV_T2D = 2
    KV_2TD = 3
    BINARY = 4
    BINARY_BUFFER = 5
    KV_MLA_FMT = 6


class MemoryObj(metaclass=abc.ABCMeta):
    @abc.abstractmethod
    def get_shape(self): ...

    @abc.abstractmethod
    def get_dtype(self): ...

    @abc.abstractmethod
    def get_memory_format(self): ...

    @property
    @abc.abstractmethod
    def byte_array(self): ...

    def ref_count_up(self): ...

    def ref_count_down(self): ...


class MemoryAllocatorInterface(metaclass=abc.ABCMeta):
    pass
