"""The cute_dsl backend against torch.matmul and cuBLASLt through the project's evaluator
(correctness checks, CUDA-graph kernel time, contenders interleaved), offline mode.

    python benchmarks/cute_dsl_vs_cublas.py out.md [--shapes 4096x4096x4096,...] [--configs SET]

SET names one of CONFIG_SETS below (--help lists them); the default is "large".

For each shape a few hand-picked cute_dsl configurations are evaluated; the table gives each
one's kernel time, TFLOP/s, error, and speedup over every baseline, and the best per shape.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal2.bench.evaluator import Evaluator  # noqa: E402
from cudal2.bench.results import MODES  # noqa: E402
from cudal2.ir import GemmProblem, KernelSpec  # noqa: E402

SHAPES = ("4096x4096x4096", "8192x8192x8192", "16384x16384x4096", "1024x16384x8192")
BASE = dict(backend="cute_dsl", arch="sm_90a", num_warps=12, load_path="tma", warp_specialization="cooperative",
            persistent=True, block_m=128, block_n=128, block_k=64, stages=4, epilogue_path="tma_store")


def split_k(slices: int, **overrides) -> dict:
    """A split-K configuration: fp32 partial tiles from registers into the workspace, then the
    reduction kernel (the only split-K variant the cute_dsl template has)."""
    return dict(decomposition="split_k", split_k=slices, split_k_reduction="workspace",
                epilogue_path="registers", **overrides)


def pingpong(**overrides) -> dict:
    """A ping-pong configuration (two consumer warpgroups on tiles of their own), by default in the 1x2
    cluster our fastest large-shape kernel runs in (benchmarks/results/cute_dsl_pingpong.md)."""
    return dict(warp_specialization="pingpong", **{"cluster_n": 2, **overrides})


# alone, a 2x1 cluster (cluster_m=2) and a 1x2 one (cluster_n=2), as config-name prefixes and fields
CLUSTER_PAIRS = (("", {}), ("c2x1 ", {"cluster_m": 2}), ("c1x2 ", {"cluster_n": 2}))
ALONE_AND_1X2 = CLUSTER_PAIRS[::2]

CONFIG_SETS = {
    # the large square-ish shapes (4096x4096x4096, 8192x8192x8192, 16384x16384x4096, 1024x16384x8192)
    "large": {
        "128x256x64 s3 c2x1": dict(block_n=256, stages=3, cluster_m=2),
        "128x256x64 s4 c2x1": dict(block_n=256, stages=4, cluster_m=2),
        "128x256x64 s4 c1x2": dict(block_n=256, stages=4, cluster_n=2),
        "128x256x64 s4": dict(block_n=256, stages=4),
        "256x128x64 s4 c2x1": dict(block_m=256, stages=4, cluster_m=2),
        "128x128x64 s6 pingpong c2x1": pingpong(stages=6, cluster_m=2, cluster_n=1),
        "128x128x64 s6 pingpong c1x2": pingpong(stages=6),
        "128x192x64 s4 c2x1": dict(block_n=192, stages=4, cluster_m=2),
        "192x128x64 w16 s4 c1x2": dict(block_m=192, num_warps=16, stages=4, cluster_n=2),
    },
    # where the time goes on skinny or shallow shapes: the epilogue path, tile and stages
    "epilogue": {
        "256x128x64 s3 tma_store": dict(block_m=256, stages=3),
        "256x128x64 s4 registers": dict(block_m=256, stages=4, epilogue_path="registers"),
        "128x256x64 s3 tma_store c1x2": dict(block_n=256, stages=3, cluster_n=2),
        "128x128x64 s6 tma_store": dict(stages=6),
        "128x128x64 s6 registers": dict(stages=6, epilogue_path="registers"),
    },
    # tile grids that leave SMs idle (fewer tiles than SMs, or a ragged last wave): data-parallel
    # against stream-K (run with --shapes 256x12288x12288,12288x256x16384,2048x128x4096,...)
    "streamk": {
        "128x256x64 s4": dict(block_n=256, stages=4),
        "128x256x64 s4 stream-K": dict(block_n=256, stages=4, decomposition="stream_k"),
        "128x128x64 s6": dict(stages=6),
        "128x128x64 s6 stream-K": dict(stages=6, decomposition="stream_k"),
        "256x128x64 s4 stream-K": dict(block_m=256, stages=4, decomposition="stream_k"),
    },
    # stream-K in clusters, against the data-parallel kernels it would replace, on grids whose last wave
    # is nearly full (1024x16384x8192 in 256x128 tiles: 3.88 waves; run with --shapes 1024x16384x8192,...)
    "streamk_cluster": {
        "256x128x64 s4 c2x1": dict(block_m=256, stages=4, cluster_m=2),
        "256x128x64 s4 c2x1 stream-K": dict(block_m=256, stages=4, cluster_m=2, decomposition="stream_k"),
        "256x128x64 s4 c1x2 stream-K": dict(block_m=256, stages=4, cluster_n=2, decomposition="stream_k"),
        "256x128x64 s4 stream-K": dict(block_m=256, stages=4, decomposition="stream_k"),
        "128x256x64 s4 c2x1 stream-K": dict(block_n=256, stages=4, cluster_m=2, decomposition="stream_k"),
        "128x128x64 s6 c1x2 stream-K": dict(stages=6, cluster_n=2, decomposition="stream_k"),
        "128x128x64 s5 pingpong c1x2": pingpong(stages=5),
    },
    # the same on grids that leave a cluster wave part empty (--shapes 256x12288x12288,512x16384x1024,...)
    "streamk_ragged": {
        "128x128x64 s6 c2x1": dict(stages=6, cluster_m=2),
        "128x128x64 s6 c2x1 stream-K": dict(stages=6, cluster_m=2, decomposition="stream_k"),
        "128x128x64 s6 c1x2 stream-K": dict(stages=6, cluster_n=2, decomposition="stream_k"),
        "128x128x64 s6 stream-K": dict(stages=6, decomposition="stream_k"),
        "256x128x64 s4 c2x1": dict(block_m=256, stages=4, cluster_m=2),
        "256x128x64 s4 c2x1 stream-K": dict(block_m=256, stages=4, cluster_m=2, decomposition="stream_k"),
        "128x192x64 s5 c2x1": dict(block_n=192, stages=5, cluster_m=2),
        "128x192x64 s5 c2x1 stream-K": dict(block_n=192, stages=5, cluster_m=2, decomposition="stream_k"),
    },
    # stream-K numbered along N on tall outputs, where the kernel's lanes then keep a row's tiles (A's
    # panel, the larger operand) at the same k; along M they keep a column's (B's), so it uses one lane
    "streamk_lanes": {
        "128x128x64 s6 c1x2": dict(stages=6, cluster_n=2),
        "128x128x64 s6 c1x2 stream-K": dict(stages=6, cluster_n=2, decomposition="stream_k"),
        "128x128x64 s6 c1x2 stream-K along N": dict(stages=6, cluster_n=2, decomposition="stream_k",
                                                    raster_order="along_n"),
        "128x128x64 s6 c2x1 stream-K": dict(stages=6, cluster_m=2, decomposition="stream_k"),
        "128x128x64 s6 c2x1 stream-K along N": dict(stages=6, cluster_m=2, decomposition="stream_k",
                                                    raster_order="along_n"),
        "128x128x64 s6 stream-K along N": dict(stages=6, decomposition="stream_k", raster_order="along_n"),
        "256x128x64 s4 c2x1 stream-K along N": dict(block_m=256, stages=4, cluster_m=2, decomposition="stream_k",
                                                    raster_order="along_n"),
    },
    # shallow K over a large output (16384x16384x128, 12288x8192x64, 16384x1024x64): the time goes to
    # writing D, so the epilogue path, the tile and the consumer scheme are what can differ
    "output_bound": {
        "128x128x128 s2 pingpong c1x2": pingpong(block_k=128, stages=2),
        "128x128x64 s2 pingpong c1x2": pingpong(stages=2),
        "128x128x64 s2 c1x2": dict(stages=2, cluster_n=2),
        "128x256x64 s2 c1x2": dict(block_n=256, stages=2, cluster_n=2),
        "256x128x64 s2 c2x1": dict(block_m=256, stages=2, cluster_m=2),
        "128x256x64 s2 c1x2 registers": dict(block_n=256, stages=2, cluster_n=2, epilogue_path="registers"),
    },
    # pipeline depth beyond one tile's k-steps on short-K shapes: the producer walks all of its CTA's tiles
    # with one pipeline, so extra stages load the next tile during this one's epilogue. The rules capped the
    # depth at one tile's k-steps until git 2957a41 (2026-11-23); the Optuna trials of the budget-24 48-shape
    # search (git 206621a) found deeper kernels that the rules-only 48-shape search after it (git 33bef28) did
    # not propose (16384x512x128: 128x128x128 ping-pong s3 1.062 of torch, s2 0.992). Each tile here at one
    # tile's depth and deeper (results: cute_dsl_walk_stages.md).
    "walk_stages": {
        "128x128x128 s2 pingpong c1x2": pingpong(block_k=128, stages=2),
        "128x128x128 s3 pingpong c1x2": pingpong(block_k=128, stages=3),
        "128x128x64 s2 pingpong c1x2": pingpong(stages=2),
        "128x128x64 s5 pingpong c1x2": pingpong(stages=5),
        "192x64x64 w8 s2 swap": dict(block_m=192, block_n=64, num_warps=8, stages=2, swap_ab=True),
        "192x64x64 w8 s5 swap": dict(block_m=192, block_n=64, num_warps=8, stages=5, swap_ab=True),
        "256x64x32 w8 s2 c1x2": dict(block_m=256, block_n=64, block_k=32, num_warps=8, stages=2, cluster_n=2),
        "256x64x32 w8 s3 c1x2": dict(block_m=256, block_n=64, block_k=32, num_warps=8, stages=3, cluster_n=2),
        "256x64x32 w8 s6 c1x2": dict(block_m=256, block_n=64, block_k=32, num_warps=8, stages=6, cluster_n=2),
    },
    # the kernels the walk-depth rule displaced, against what the rules propose since
    # (search_48_both_backends_h100_2026-11-23.md: 12288x8192x64 went from 256x64x64 s2 1x2, 1.076-1.077 of
    # torch in the two 48-shape searches before it (git 206621a, 33bef28), to 192x128 s5 at 1.059;
    # 16384x256x64's winner in git 206621a, 192x64x64 s5 swapped alone, 1.132, against s3 in 1x2, 1.062)
    "walk_displaced": {
        **{f"256x64x64 s{s} c1x2": dict(block_m=256, block_n=64, stages=s, cluster_n=2) for s in (2, 3, 5)},
        **{f"192x128x64 w8 s{s} c1x2": dict(block_m=192, num_warps=8, stages=s, cluster_n=2) for s in (2, 5)},
        **{f"192x64x64 w8 s{s} swap {c}".strip(): dict(block_m=192, block_n=64, num_warps=8, stages=s,
                                                        swap_ab=True, **kw)
           for s in (3, 5) for c, kw in ALONE_AND_1X2},
        **{f"256x64x64 w8 s{s} swap c1x2": dict(block_m=256, block_n=64, num_warps=8, stages=s, swap_ab=True,
                                                 cluster_n=2) for s in (2, 5)},
    },
    # short-K tall outputs, where every kernel the rules proposed until the one-k-step rule (git d787df5) was
    # in a 1x2 cluster: each tile's k-walk is a step or two, so the multicast saves little, and on 16384x256x64
    # the swapped 192x64 ran 4-5% faster alone (walk_displaced). The winners of
    # search_48_both_backends_h100_2026-11-23.md on these shapes, alone and in 1x2.
    "short_k_clusters": {
        f"{name} {c}".strip(): {**fields, **kw}
        for name, fields in (
            ("128x128x64 s5 pingpong", dict(warp_specialization="pingpong", stages=5)),
            ("128x128x64 s4", dict(stages=4)),
            ("128x128x64 s4 swap", dict(stages=4, swap_ab=True)),
            ("128x64x64 w8 s4 swap", dict(block_n=64, num_warps=8, stages=4, swap_ab=True)),
            ("192x64x64 w8 s3 swap", dict(block_m=192, block_n=64, num_warps=8, stages=3, swap_ab=True)),
            ("256x128x64 s4 swap", dict(block_m=256, stages=4, swap_ab=True)))
        for c, kw in ALONE_AND_1X2
    },
    # clusters of four (2x2: each CTA's A tile multicast along N and B tile along M) against the two-CTA
    # clusters of the large-shape winners: a quarter fewer L2 reads per FLOP, so less power at the cap
    "cluster4": {
        "256x128x64 s4 c2x1": dict(block_m=256, stages=4, cluster_m=2),
        "256x128x64 s4 c2x2": dict(block_m=256, stages=4, cluster_m=2, cluster_n=2),
        "128x256x64 s4 c2x2": dict(block_n=256, stages=4, cluster_m=2, cluster_n=2),
        "128x128x64 s5 pingpong c1x2": pingpong(stages=5),
        "128x128x64 s5 pingpong c2x2": pingpong(stages=5, cluster_m=2),
        "128x128x64 s6 c2x2": dict(stages=6, cluster_m=2, cluster_n=2),
    },
    # small and shallow grids (fewer tiles than SMs at 128x128): narrower tiles, 8 warps, split-K
    # and stream-K (run with --shapes 256x4096x2048,2048x1024x2048,512x4096x4096,2048x128x4096,...)
    "fill": {
        "128x128x64 s6": dict(stages=6),
        "128x64x64 s8": dict(block_n=64, stages=8),
        "128x64x64 s8 stream-K": dict(block_n=64, stages=8, decomposition="stream_k"),
        "64x128x64 w8 s8": dict(block_m=64, num_warps=8, stages=8),
        "128x128x64 s6 stream-K": dict(stages=6, decomposition="stream_k"),
        "128x128x64 s6 split2": split_k(2, stages=6),
        "128x64x64 s8 split2": split_k(2, block_n=64, stages=8),
    },
    # the tiles, stages and clusters cuBLAS picks on the shapes we lose (benchmarks/cublas_kernels.py:
    # 128x192 2x1 on 12288x256x16384, 192x128 1x2 on 256x12288x12288, 128x96 x7 1x2 on 12288x128x12288,
    # 64x32 x16 1x2 on 2048x128x4096, 64x64 x13 2x1 on 4096x128x4096, 128x64 x8 1x2 on 256x4096x2048,
    # 128x128 x6 2x1 on 2048x1024x2048): no split-K or stream-K anywhere
    "widths": {
        "128x192x64 s4 c2x1": dict(block_n=192, stages=4, cluster_m=2),
        "128x192x64 s4": dict(block_n=192, stages=4),
        "192x128x64 w16 s4 c1x2": dict(block_m=192, num_warps=16, stages=4, cluster_n=2),
        "128x96x64 s6 c1x2": dict(block_n=96, stages=6, cluster_n=2),
        "64x32x64 w8 s16 c1x2": dict(block_m=64, block_n=32, num_warps=8, stages=16, cluster_n=2),
        "64x64x64 w8 s12 c2x1": dict(block_m=64, block_n=64, num_warps=8, stages=12, cluster_m=2),
        "128x64x64 s8 c1x2": dict(block_n=64, stages=8, cluster_n=2),
        "128x128x64 s6 c2x1": dict(stages=6, cluster_m=2),
    },
    # a small output over a deep K (512x512x12288: 16 tiles of 128x128 for 132 SMs): the K split across
    # CTAs, reduced by a second kernel (split-K) or in the kernel by the tile's owner (stream-K)
    "deepk": {
        "128x128x64 s6 split4": split_k(4, stages=6),
        "128x128x64 s6 split8": split_k(8, stages=6),
        "128x64x64 s8 split4": split_k(4, block_n=64, stages=8),
        "128x128x64 s6 stream-K": dict(stages=6, decomposition="stream_k"),
        "128x256x64 s4 stream-K": dict(block_n=256, stages=4, decomposition="stream_k"),
        "128x64x64 s8 stream-K": dict(block_n=64, stages=8, decomposition="stream_k"),
        "64x128x64 w8 s8 stream-K": dict(block_m=64, num_warps=8, stages=8, decomposition="stream_k"),
    },
    # what cuBLAS runs there (cublas_kernels.py: 64x64 x13 2x1 split-K on 512x512x12288, 64x32 x16 1x2
    # split-K on 512x128x8192): small tiles, deep pipelines, a cluster of two, and split-K
    "deepk_clusters": {
        "128x128x64 s6 split8": split_k(8, stages=6),
        "128x128x64 s6 c2x1 split8": split_k(8, stages=6, cluster_m=2),
        "64x64x64 w8 s13 c2x1 split2": split_k(2, block_m=64, block_n=64, num_warps=8, stages=13, cluster_m=2),
        "64x64x64 w8 s13 c2x1 split4": split_k(4, block_m=64, block_n=64, num_warps=8, stages=13, cluster_m=2),
        "64x64x64 w8 s13 split2": split_k(2, block_m=64, block_n=64, num_warps=8, stages=13),
        "64x128x64 w8 s8 c2x1 split4": split_k(4, block_m=64, num_warps=8, stages=8, cluster_m=2),
        "64x32x64 w8 s16 c1x2 split4": split_k(4, block_m=64, block_n=32, num_warps=8, stages=16, cluster_n=2),
        "64x32x64 w8 s16 c1x2 split8": split_k(8, block_m=64, block_n=32, num_warps=8, stages=16, cluster_n=2),
    },
    # wide tiles cut into many K slices, for 512x512x12288 (planned in git 8443e6c, run on 2026-11-23: the wide
    # tiles measured 24.3-30.9 us against 19.0 for 64x128 2x1 split 4, cute_dsl_deepk_wide.md). Every one
    # of these grids has 128 CTAs except 128x256 split 8 (64). Each CTA pulls its operand tiles through
    # L2, and a cluster's CTAs share one by multicast. 64x128 2x1 split 4 pulls 100 MB (about 5.5 TB/s in
    # its 18 us, cute_dsl_deepk.md). 128x128 2x1 split 8 pulls 75 MB, and 128x256 2x1 split 16 pulls
    # 50 MB (38 MB in 2x2) for a fp32 workspace 4x larger: 16 MB written, then read by the reduction kernel.
    "deepk_wide": {
        "64x128x64 w8 s8 c2x1 split4": split_k(4, block_m=64, num_warps=8, stages=8, cluster_m=2),
        "128x128x64 s6 c2x1 split8": split_k(8, stages=6, cluster_m=2),
        "128x256x64 s4 c2x1 split8": split_k(8, block_n=256, stages=4, cluster_m=2),
        "128x256x64 s4 c2x1 split16": split_k(16, block_n=256, stages=4, cluster_m=2),
        "128x256x64 s4 c1x2 split16": split_k(16, block_n=256, stages=4, cluster_n=2),
        "256x128x64 s4 c1x2 split16": split_k(16, block_m=256, stages=4, cluster_n=2),
        "128x256x64 s4 c2x2 split16": split_k(16, block_n=256, stages=4, cluster_m=2, cluster_n=2),
    },
    # which way a cluster of two pays in split-K: each of four split-K kernels alone, in 2x1 (B's tile
    # shared) and in 1x2 (A's tile shared). Until git 2957a41 the rules modelled split-K clusters as even with
    # the kernel alone, and their tile diversity kept one split-K kernel per tile, so the 2x1 64x128 split 4
    # that measured fastest on 512x512x12288 (cute_dsl_deepk*.md) was not proposed; a 2x1 had cost 5-9% on
    # 512x128x8192 (cute_dsl_splitk_clusters.md).
    "splitk_clusters": {
        **{f"64x128x64 w8 s8 {c}split4": split_k(4, block_m=64, num_warps=8, stages=8, **kw)
           for c, kw in CLUSTER_PAIRS},
        **{f"128x128x64 s6 {c}split8": split_k(8, stages=6, **kw) for c, kw in CLUSTER_PAIRS},
        **{f"64x64x64 w8 s13 {c}split4": split_k(4, block_m=64, block_n=64, num_warps=8, stages=13, **kw)
           for c, kw in CLUSTER_PAIRS},
        **{f"64x64x64 w8 s14 {c}split8": split_k(8, block_m=64, block_n=64, num_warps=8, stages=14, **kw)
           for c, kw in CLUSTER_PAIRS},
    },
    # the same split-K tiles with K steps of 64 and a deep pipeline against steps of 128 and 3-4 stages
    # (the rules model had ranked 3 stages first: it charged every stage to the prologue)
    "deepk_pipeline": {
        "64x128x64 w8 s8 c2x1 split4": split_k(4, block_m=64, num_warps=8, stages=8, cluster_m=2),
        "64x128x128 w8 s3 c2x1 split4": split_k(4, block_m=64, block_k=128, num_warps=8, stages=3, cluster_m=2),
        "64x128x128 w8 s4 c2x1 split4": split_k(4, block_m=64, block_k=128, num_warps=8, stages=4, cluster_m=2),
        "128x128x64 s6 c2x1 split8": split_k(8, stages=6, cluster_m=2),
        "128x128x128 s3 c2x1 split8": split_k(8, block_k=128, stages=3, cluster_m=2),
        "64x32x64 w8 s16 c2x1": dict(block_m=64, block_n=32, num_warps=8, stages=16, cluster_m=2),
        "64x32x128 w8 s8 c2x1": dict(block_m=64, block_n=32, block_k=128, num_warps=8, stages=8, cluster_m=2),
    },
    # around the best of "large" on the shape furthest from the target (1024x16384x8192: 1.008 of torch):
    # pipeline depth, raster group and direction, the register split, the epilogue path, ping-pong on
    # a 64x256 tile, cuBLAS's 256x128 1x2, and stream-K for the last, 88%-full wave of 512 tiles
    "large_sweep": {
        "128x128x64 s6 pingpong c1x2": pingpong(stages=6),
        "128x128x64 s5 pingpong c1x2": pingpong(stages=5),
        "128x128x64 s4 pingpong c1x2": pingpong(stages=4),
        "128x128x64 s6 pingpong c1x2 g4": pingpong(stages=6, raster_group=4),
        "128x128x64 s6 pingpong c1x2 g16": pingpong(stages=6, raster_group=16),
        "128x128x64 s6 pingpong c1x2 along_n": pingpong(stages=6, raster_order="along_n"),
        "128x128x64 s6 pingpong c1x2 registers": pingpong(stages=6, epilogue_path="registers"),
        "128x128x64 s6 pingpong c1x2 r24/240": pingpong(stages=6, producer_registers=24, consumer_registers=240),
        "64x256x64 s4 pingpong c1x2": pingpong(block_m=64, block_n=256, stages=4),
        "64x256x64 s4 pingpong c2x1": pingpong(block_m=64, block_n=256, stages=4, cluster_m=2, cluster_n=1),
        "128x256x64 s4": dict(block_n=256, stages=4),
        "128x256x64 s4 stream-K": dict(block_n=256, stages=4, decomposition="stream_k"),
        "128x256x64 s4 g16": dict(block_n=256, stages=4, raster_group=16),
        "128x256x64 s4 along_n": dict(block_n=256, stages=4, raster_order="along_n"),
        "256x128x64 s4 c1x2": dict(block_m=256, stages=4, cluster_n=2),
        "256x128x64 s4 c1x2 along_n": dict(block_m=256, stages=4, cluster_n=2, raster_order="along_n"),
    },
    # ping-pong 128x128 c1x2 at 4, 5 and 6 stages on the four large shapes (large_sweep: 5 stages led on
    # 1024x16384x8192 and 16384x16384x4096, 6 stages fell 4-9% behind), beside the other bests of "large"
    "pingpong_stages": {
        "128x128x64 s4 pingpong c1x2": pingpong(stages=4),
        "128x128x64 s5 pingpong c1x2": pingpong(stages=5),
        "128x128x64 s6 pingpong c1x2": pingpong(stages=6),
        "128x128x64 s5 pingpong c2x1": pingpong(stages=5, cluster_m=2, cluster_n=1),
        "128x128x64 s5 pingpong": pingpong(stages=5, cluster_n=1),
        "128x256x64 s4 c1x2": dict(block_n=256, stages=4, cluster_n=2),
        "256x128x64 s4 c1x2": dict(block_m=256, stages=4, cluster_n=2),
        "192x128x64 w16 s4 c1x2": dict(block_m=192, num_warps=16, stages=4, cluster_n=2),
    },
    # the ping-pong kernel's K step: 64 with 5 stages against 128 with 2-3 and 32 with 10 (the 48-shape
    # search of 2026-11-22, git 6493f5d, chose 128x128x128 s2 ping-pong where K is one step, 16384x16384x128)
    "pingpong_k": {
        "128x128x64 s5 pingpong c1x2": pingpong(stages=5),
        "128x128x128 s3 pingpong c1x2": pingpong(block_k=128, stages=3),
        "128x128x128 s2 pingpong c1x2": pingpong(block_k=128, stages=2),
        "128x128x32 s10 pingpong c1x2": pingpong(block_k=32, stages=10),
        "128x256x64 s4 c1x2": dict(block_n=256, stages=4, cluster_n=2),
    },
    # which operand a cluster multicasts: a 128x128 tile reads 32 KiB per k-step from L2 alone, 24 with
    # A shared across a 1x2 cluster, 16 with both shared in 2x2 (ping-pong lost 25-37% without a cluster)
    "pingpong_clusters": {
        "128x128x64 s5 pingpong c1x2": pingpong(stages=5),
        "128x128x64 s5 pingpong c2x2": pingpong(stages=5, cluster_m=2),
        "128x128x64 s4 pingpong c2x2": pingpong(stages=4, cluster_m=2),
        "128x128x64 s6 c1x2": dict(stages=6, cluster_n=2),
        "128x128x64 s6": dict(stages=6),
        "128x256x64 s4 c1x2": dict(block_n=256, stages=4, cluster_n=2),
        "128x256x64 s4 c2x2": dict(block_n=256, stages=4, cluster_m=2, cluster_n=2),
    },
    # swap_ab (the kernel computes D^T = B^T A^T) on tall outputs, against the unswapped bests: the
    # tiles cuBLAS runs there, in D's terms (192x128 in 1x2 on 12288x256x16384, 96x128 in 2x1 on
    # 12288x128x12288, 32x64 in 2x1 with 16 stages on 2048x128x4096, 64x64 in 1x2 on 4096x128x4096)
    "swap_ab": {
        "192x128x64 w16 s4 c1x2": dict(block_m=192, num_warps=16, stages=4, cluster_n=2),
        "192x128x64 s4 c1x2 swap": dict(block_m=192, stages=4, cluster_n=2, swap_ab=True),
        "192x128x64 s4 c2x1 swap": dict(block_m=192, stages=4, cluster_m=2, swap_ab=True),
        "128x128x64 s6 c2x1": dict(stages=6, cluster_m=2),
        "96x128x64 s6 c2x1 swap": dict(block_m=96, stages=6, cluster_m=2, swap_ab=True),
        "96x128x64 s6 swap": dict(block_m=96, stages=6, swap_ab=True),
        "64x32x128 w8 s8 c1x2": dict(block_m=64, block_n=32, block_k=128, num_warps=8, stages=8, cluster_n=2),
        "32x64x64 w8 s16 c2x1 swap": dict(block_m=32, block_n=64, num_warps=8, stages=16, cluster_m=2, swap_ab=True),
        "64x64x64 w8 s12 c1x2 swap": dict(block_m=64, block_n=64, num_warps=8, stages=12, cluster_n=2, swap_ab=True),
        "64x64x64 w8 s12 c2x1": dict(block_m=64, block_n=64, num_warps=8, stages=12, cluster_m=2),
    },
    # Which operand a cluster should multicast: on NN problems sharing A (K-major) beat sharing B
    # (N-major) in every pair measured. The same clusters on NT (both operands K-major) and TN (neither)
    # tell whether that is A against B or K-major against MN-major.
    "multicast_major": {
        "128x128x64 s5 pingpong": pingpong(stages=5, cluster_n=1),
        "128x128x64 s5 pingpong c1x2": pingpong(stages=5),
        "128x128x64 s5 pingpong c2x1": pingpong(stages=5, cluster_m=2, cluster_n=1),
        "128x256x64 s4": dict(block_n=256, stages=4),
        "128x256x64 s4 c1x2": dict(block_n=256, stages=4, cluster_n=2),
        "128x256x64 s4 c2x1": dict(block_n=256, stages=4, cluster_m=2),
    },
    # Short, wide outputs (M of 256-512, N in the thousands), where a 2x1 cluster shares B, the operand
    # every M tile reads: the best kernels of the 48-shape search of 2026-11-22 (git 6493f5d) there ran in 2x1
    # clusters, and the 48-shape search of git 28d9f90, which modelled 1x2 ahead, lost 2-17% on them. The same
    # tiles in 2x1, 1x2 and alone.
    "cluster_wide": {
        "64x64x128 w8 s6 c2x1": dict(block_m=64, block_n=64, block_k=128, num_warps=8, stages=6, cluster_m=2),
        "64x64x128 w8 s6 c1x2": dict(block_m=64, block_n=64, block_k=128, num_warps=8, stages=6, cluster_n=2),
        "64x64x128 w8 s6": dict(block_m=64, block_n=64, block_k=128, num_warps=8, stages=6),
        "64x128x128 w8 s4 c2x1": dict(block_m=64, block_k=128, num_warps=8, cluster_m=2),
        "64x128x128 w8 s4 c1x2": dict(block_m=64, block_k=128, num_warps=8, cluster_n=2),
        "128x128x64 s6 c2x1": dict(stages=6, cluster_m=2),
        "128x128x64 s6 c1x2": dict(stages=6, cluster_n=2),
        "128x128x64 s6": dict(stages=6),
    },
    # swap_ab's 192x128 in 1x2 on 12288x256x16384 with 5 stages, which only the registers epilogue
    # left shared memory for before the TMA store staged fewer pieces (see epilogue_pieces)
    "swap_ab_stages": {
        "192x128x64 s4 c1x2 swap": dict(block_m=192, stages=4, cluster_n=2, swap_ab=True),
        "192x128x64 s5 c1x2 swap registers": dict(block_m=192, stages=5, cluster_n=2, swap_ab=True,
                                                   epilogue_path="registers"),
        "192x128x64 s4 c1x2 swap registers": dict(block_m=192, stages=4, cluster_n=2, swap_ab=True,
                                                   epilogue_path="registers"),
        "192x128x64 w16 s5 c1x2 registers": dict(block_m=192, num_warps=16, stages=5, cluster_n=2,
                                                  epilogue_path="registers"),
    },
    # 192-wide tiles with 5 stages and the TMA store, which two staged output pieces instead of four
    # make room for (epilogue_stages), against 4 stages and four pieces; cuBLAS runs 128x192 with 5
    "epilogue_pieces": {
        "192x128x64 s4 c1x2 swap": dict(block_m=192, stages=4, cluster_n=2, swap_ab=True),
        "192x128x64 s5 c1x2 swap": dict(block_m=192, stages=5, cluster_n=2, swap_ab=True),
        "128x192x64 s4 c2x1": dict(block_n=192, stages=4, cluster_m=2),
        "128x192x64 s5 c2x1": dict(block_n=192, stages=5, cluster_m=2),
        "192x128x64 w16 s4 c1x2": dict(block_m=192, num_warps=16, stages=4, cluster_n=2),
        "192x128x64 w16 s5 c1x2": dict(block_m=192, num_warps=16, stages=5, cluster_n=2),
        "64x128x128 w8 s4 c2x1": dict(block_m=64, block_k=128, num_warps=8, cluster_m=2),
        "64x128x64 w8 s8 c2x1": dict(block_m=64, num_warps=8, stages=8, cluster_m=2),
    },
    # one operand streams from DRAM through a deep K: orientation, pipeline depth, K step, clusters
    "streaming": {
        "256x128x64 s3": dict(block_m=256, stages=3),
        "128x256x64 s3": dict(block_n=256, stages=3),
        "128x128x64 s6": dict(stages=6),
        "128x128x128 s3": dict(block_k=128, stages=3),
        "256x128x64 s2": dict(block_m=256, stages=2),
        "128x256x64 s3 c2x1": dict(block_n=256, stages=3, cluster_m=2),
        "256x128x64 s3 c1x2": dict(block_m=256, stages=3, cluster_n=2),
        "128x128x64 s6 c2x1": dict(stages=6, cluster_m=2),
    },
    # under the H100's 700 W cap a large GEMM's clock follows its own power draw (ncu: cuBLAS's 256x128 1x2
    # ran 1024x16384x8192 at 1.55 GHz, our 128x128 ping-pong 1x2 at 1.47 GHz, in the same cycle count):
    # tiles that pull fewer bytes through L2 per FLOP, timed offline and sustained (--mode sustained)
    "power": {
        "128x128x64 s5 pingpong c1x2": pingpong(stages=5),
        "256x128x64 s4 c1x2": dict(block_m=256, stages=4, cluster_n=2),
        "256x128x64 s4 c2x1": dict(block_m=256, stages=4, cluster_m=2),
        "128x256x64 s4 c1x2": dict(block_n=256, stages=4, cluster_n=2),
        "128x256x64 s4 c2x1": dict(block_n=256, stages=4, cluster_m=2),
        "192x192x64 w16 s4 c2x1": dict(block_m=192, block_n=192, num_warps=16, stages=4, cluster_m=2),
    },
}
CONFIGS = CONFIG_SETS["large"]


def parse_shape(shape: str) -> GemmProblem:
    """A shape as the benchmark tables write it, MxNxK or MxNxK-LAYOUT (e.g. 4096x4096x4096-NT)."""
    dims, _, layout = shape.partition("-")
    return GemmProblem.parse(dims, **({"layout": layout} if layout else {}))


def _shape_rows(ev: Evaluator, shape: str, names, specs, modes=("offline",)) -> list[str]:
    """One row per baseline and configuration, for each timing mode (a mode column beside the shape)."""
    problem = parse_shape(shape)
    results = ev.evaluate(problem, specs, tuple(modes))
    report = ev.report(problem, results, tuple(modes))
    fmt = lambda x: f"{x:.3f}" if x else "-"  # noqa: E731
    rows = []
    for mode in modes:
        for name, b in report.baselines.items():
            t = b.kernel_ms(mode)
            rows.append(f"| {shape} | {mode} | baseline {name} | {'ok' if b.available else 'n/a'} | "
                        f"{t * 1e3 if t else float('nan'):.1f} | "
                        f"{problem.flops / (t * 1e9) if t else float('nan'):.1f} | | | | |")
        for name, r in zip(names, report.candidates):
            t = r.kernel_ms(mode)
            sp = {b: report.speedup(r, b, mode) for b in ("torch", "cublaslt_heuristic", "cublaslt_autotune")}
            err = f"{r.correctness.rel_error:.1e}" if r.correctness else "-"
            rows.append(f"| {shape} | {mode} | {name} | {r.status} {r.reason[:60]} | "
                        f"{t * 1e3 if t else float('nan'):.1f} | "
                        f"{problem.flops / (t * 1e9) if t else float('nan'):.1f} | {err} | "
                        f"{fmt(sp['torch'])} | {fmt(sp['cublaslt_heuristic'])} | {fmt(sp['cublaslt_autotune'])} |")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="MxNxK[-LAYOUT], comma-separated")
    ap.add_argument("--configs", choices=sorted(CONFIG_SETS), default="large")
    ap.add_argument("--mode", action="append", choices=MODES,
                    help="timing mode (repeat for several; default offline). sustained: each contender alone "
                         "at the clock its own power draw sets (cudal2/bench/timing.py)")
    args = ap.parse_args(argv)
    modes = tuple(args.mode or ("offline",))
    configs = CONFIG_SETS[args.configs]
    names = list(configs)
    specs = [KernelSpec(**{**BASE, **configs[n]}) for n in names]
    lines = ["| shape | mode | config | status | kernel us | TFLOP/s | rel. error | vs torch | vs cuBLASLt heuristic "
             "| vs cuBLASLt autotune |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    with Evaluator(device="cuda:0") as ev:
        env = ev.environment()
        for shape in args.shapes.split(","):
            lines += _shape_rows(ev, shape, names, specs, modes)
            print("\n".join(lines[-(len(specs) + 3) * len(modes):]), flush=True)
    text = "\n".join([f"# cute_dsl vs cuBLAS ({', '.join(modes)}; kernel time by CUDA-graph replay)\n",
                      f"Environment: {env}\n", *lines, ""])
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
