"""Triton backend (placeholder: capabilities only; rendering lands with the templates)."""

from __future__ import annotations

from ..ir import Capabilities, options
from .base import Backend


class TritonBackend(Backend):
    name = "triton"
    version = "1"
    capabilities = Capabilities(
        options=options(
            load_path=["pointer", "tma"],
            warp_specialization=["none"],
            mma=["auto"],
            cluster_m=[1], cluster_n=[1],
            smem_padding=[0], smem_swizzle=["auto"],
            epilogue_path=["registers"],
            epilogue_subtile=[1],
            decomposition=["data_parallel", "split_k"],
            **{"problem.accumulator": ["float32"]},
        ),
        per_arch={"sm_80": options(load_path=["pointer"])},
    )
    templates = {"matmul": "matmul.py.j2"}
