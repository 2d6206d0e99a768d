"""Compile steps that hang or die for some specs (block_m == 16), for the compile-pool tests."""

import os
import time

from cudal2.bench.compile_pool import Prepared


def hang_on_block_m_16(problem, spec):
    if spec.block_m == 16:
        time.sleep(3600)
    return Prepared(source=None, status="ok", reason=f"compiled {spec.block_m}")


def die_on_block_m_16(problem, spec):
    """A compile that aborts its process for some specs (block_m == 16), as the CuTe DSL compiler
    did on an H100 search: the pool breaks under every task it holds."""
    if spec.block_m == 16:
        time.sleep(0.5)  # let its siblings start, so that they break with it
        os.abort()
    time.sleep(0.2)
    return Prepared(source=None, status="ok", reason=f"compiled {spec.block_m} for K={problem.k}")


def report_niceness(problem, spec):
    """A compile step that says how nice its process runs."""
    return Prepared(source=None, status="ok", reason=str(os.nice(0)))
