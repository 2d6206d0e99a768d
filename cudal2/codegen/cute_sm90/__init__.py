"""The Hopper GEMM kernel of the cute_dsl backend, as DSL Python: the kernel (gemm.py), its tile
scheduler (scheduler.py) and its epilogue (epilogue.py), specialized by a GemmConfig (config.py),
and the host-side glue a compiled kernel is called through (binding.py). Only config.py is imported
here: it needs no DSL, so a backend can describe a kernel on a machine without one."""

from .config import GemmConfig

__all__ = ["GemmConfig"]
