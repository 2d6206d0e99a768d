"""A compile step that hangs for some specs (block_m == 16), for the compile-pool timeout test."""

import time

from cudal2.bench.compile_pool import Prepared


def hang_on_block_m_16(problem, spec):
    if spec.block_m == 16:
        time.sleep(3600)
    return Prepared(source=None, status="ok", reason=f"compiled {spec.block_m}")
