"""Codegen: the Backend protocol, the registry, and one module per backend."""

from .base import Backend, Kernel, Source, Support
from .registry import ENTRY_POINT_GROUP, available_backends, get_backend, refresh, register

__all__ = ["ENTRY_POINT_GROUP", "Backend", "Kernel", "Source", "Support", "available_backends",
           "get_backend", "refresh", "register"]
