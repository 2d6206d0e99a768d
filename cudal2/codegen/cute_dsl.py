"""CuTe DSL backend (placeholder: capabilities only)."""

from __future__ import annotations

from ..ir import Capabilities, options
from .base import Backend


class CuteDslBackend(Backend):
    name = "cute_dsl"
    version = "0"
    capabilities = Capabilities(options=options(arch=["sm_90a"], load_path=["tma"]))
