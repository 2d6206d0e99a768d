"""What the rules proposer knows of each backend and arch, as data: the reference part's rates,
each backend's search options in preference order (`Preferences`), and how the factors measured on a
GPU of the arch adjust the analytical model (`_measured_factor`; the values and their sources are in
cudal2/data/rules/factors.csv, read by factors.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from cudal2.ir import DTYPE_BYTES, DeviceProfile, GemmProblem, arch_limits

from .factors import factor


@dataclass(frozen=True)
class Throughput:
    """Approximate peak rates of the reference part of an arch (from the hardware table), and the
    fixed cost of a launch. They only rank candidates."""

    tflops: float  # dense fp16 tensor-core TFLOP/s
    dram_tbs: float  # DRAM TB/s
    l2_tbs: float  # L2 -> SM TB/s
    launch_us: float = 3.0  # launch + first-wave ramp

    @classmethod
    def of_device(cls, device: DeviceProfile) -> "Throughput":
        return cls(tflops=device.peak_tflops, dram_tbs=device.dram_tbps, l2_tbs=arch_limits(device.arch).l2_tbps,
                   launch_us=factor(device.arch, "*", "launch_us"))


@dataclass(frozen=True)
class Preferences:
    """A backend's search options, in preference order; filtered by its Capabilities."""

    # tile widths (block_m and block_n) in preference order; None: every width the backend declares,
    # so that the wave model, not a list, picks among them
    block_mn: tuple[int, ...] | None = (256, 128, 64, 32, 16)
    block_k: tuple[int, ...] = (64, 32, 128)
    num_warps: tuple[int, ...] = (4, 8, 2)
    max_stages: int = 5
    smem_reserve: int = 8 * 1024  # bytes the compiler uses beyond the pipeline buffers
    split_k: tuple[int, ...] = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    split_k_reduction: tuple[str, ...] = ("serial", "workspace", "atomic")
    load_path: tuple[str, ...] = ("tma", "cp_async", "pointer")
    raster_group: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    min_acc_registers: int = 2  # fewer fp32 accumulators per thread than this wastes warps
    # data-parallel specs take the first allowed; split-K partials always leave through registers
    epilogue_path: tuple[str, ...] = ("registers",)
    # Ping-pong consumers (each warpgroup a whole tile, one's main loop under the other's epilogue),
    # offered only on these (block_m, block_n, cluster_m, cluster_n), data-parallel, with at most
    # pingpong_max_stages stages; modelled as the cooperative kernel of that tile times the factor
    # pingpong_factor (factors.csv).
    pingpong_variants: tuple[tuple[int, int, int, int], ...] = ()
    pingpong_max_stages: int = 16
    pingpong_raster: tuple[int, str] | None = None  # (raster_group, raster_order); None = the L2 rule
    # swap_ab (the kernel computes D^T = B^T A^T) is offered on tall outputs (M >= 4N), where it lets
    # D's long dimension take WGMMA widths; modelled as the unswapped kernel times swap_ab_factor
    # (factors.csv).
    fixed: Mapping[str, Any] = field(default_factory=dict)  # set on every spec of this backend


PREFERENCES: dict[str, Preferences] = {
    # Triton pipelines pointer loads itself (cp.async on sm_80) and uses wgmma on Hopper for
    # block_m >= 64 with whole warpgroups; 8 warps carry the 128x256 tiles.
    "triton": Preferences(),
    # CUDA C++ sm_80 kernels: an m16n8 accumulator gives each thread two adjacent columns, so the
    # registers epilogue stores 4 bytes at a time over 8 rows; staged through shared memory, each
    # thread stores a whole 16-byte vector of one row, and the warp whole rows (what Triton's sm_80
    # code does too). Output-bound grids need the wide stores, so the staged path comes first.
    "cuda_cpp": Preferences(epilogue_path=("smem", "registers")),
    # CuTe DSL Hopper kernels: TMA + wgmma, warp-specialized, one producer warpgroup.
    # Every width the kernel declares (multiples of 16 up to 256): widths between the powers of two
    # (cuBLAS's 192 and 96, quack's 160 and 208) are the answer to grids that 64/128/256 leave ragged,
    # and which one fills the waves best is the model's to say. Small tiles on deep K want deep
    # pipelines (cuBLAS runs 64x32 tiles with 16 stages); docs/results.md.
    "cute_dsl": Preferences(block_mn=None, block_k=(64, 128), num_warps=(12, 8, 16),
                            max_stages=16, fixed={"warp_specialization": "cooperative"},
                            # The registers epilogue stores element by element; the TMA store writes
                            # whole tiles, which is what wide outputs need, so it comes first.
                            epilogue_path=("tma_store", "registers"),
                            # the kernel's barriers; its epilogue buffers are counted apart
                            smem_reserve=1024,
                            # Ping-pong hides one warpgroup's epilogue under the other's main loop,
                            # which the model does not see: it puts the cooperative 128x128 well behind
                            # 128x256, yet ping-pong 128x128 in a 1x2 cluster with 5 stages was our
                            # fastest kernel on the large shapes. It is offered only in the form
                            # that measured ahead: other stage counts, cluster shapes, tiles and
                            # rasters (the L2 rule's group included) were slower (docs/results.md).
                            pingpong_variants=((128, 128, 1, 2),),
                            pingpong_max_stages=5, pingpong_raster=(8, "along_m")),
}
DEFAULT_PREFERENCES = Preferences()

# A cluster of two multicasts one operand's tile to both CTAs, halving its L2 reads; which operand it
# shares matters, so its gain (cluster_gain in factors.csv) goes to one direction (_cluster_along_m_pays):
# along the grid's short side where it has at most short_grid_tiles tiles and the other side more (a 2x1
# cluster sharing B on short, wide outputs, a 1x2 on tall ones), along N (1x2, sharing A) elsewhere. A
# split-K cluster's multicast is lost in the noise where the smaller operand is under
# split_k_cluster_min_bytes (_split_k_cluster_pays).


def _cluster_along_m_pays(problem: GemmProblem, f: dict) -> bool:
    """Whether the measurements favour a 2x1 cluster (B's tile shared) on this grid: on a short side
    of M; elsewhere a 1x2 (A's tile shared). See cluster_gain in factors.csv."""
    gm, gn = _cdiv(problem.m, f["block_m"]), _cdiv(problem.n, f["block_n"])
    return gm <= factor(f["arch"], f["backend"], "short_grid_tiles", 0) and gm < gn


def _split_k_cluster_pays(problem: GemmProblem, f: dict) -> bool:
    """Whether a split-K kernel's cluster is one that measured ahead of the same kernel alone: the one
    that multicasts the wider of the CTA's two operand tiles (the 64x128 tile's B tile in 2x1), or for a
    square tile the direction _cluster_along_m_pays picks, and only where each operand is a few MiB
    at least: on smaller operands clusters moved the same kernels either way (docs/results.md)."""
    m, n, k = problem.shape
    if min(m, n) * k * DTYPE_BYTES[problem.dtype] < factor(f["arch"], f["backend"], "split_k_cluster_min_bytes", 0):
        return False
    bm, bn = f["block_m"], f["block_n"]
    along_m = bn > bm if bm != bn else _cluster_along_m_pays(problem, f)
    return f.get("cluster_m", 1) > 1 if along_m else f.get("cluster_n", 1) > 1


def _measured_factor(problem: GemmProblem, f: dict) -> float:
    """What the analytical model does not see but a GPU of the arch measured (factors.csv), as a factor
    on its time: cluster_gain for a data-parallel or stream-K cluster in the direction _cluster_along_m_pays picks (none
    with one k-step per tile), and for a split-K cluster in the direction _split_k_cluster_pays picks (the
    other direction measured about even with the same kernel without one, so it is modelled even and
    measured too), tall_tile_factor for a 256x128 tile, swap_ab_factor for swapped operands,
    stream_k_factor for stream-K, pingpong_factor for ping-pong consumers (1.0 where the arch and
    backend have no row)."""
    fx = lambda name: factor(f["arch"], f["backend"], name, 1.0)  # noqa: E731
    # (stream-K in the favoured cluster measured well ahead of stream-K without one; the model's gain
    # only has to rank it above the unclustered kernel)
    if f.get("decomposition", "data_parallel") == "split_k":
        favoured = _split_k_cluster_pays(problem, f)
    elif _cdiv(problem.k, f["block_k"]) < 2:
        # one k-step per tile: each operand tile is loaded once, so the multicast saves only one L2 read
        # per output tile, and on short-K shapes the kernels mostly ran as fast or faster alone (the
        # output-bound 12288x8192x64 is the exception; docs/results.md). Keeping the gain where each CTA
        # has many tiles, for that shape, was tried: where every candidate ties at the DRAM floor it
        # ranked small, unmeasured clustered tiles first, so one k-step is modelled even everywhere
        favoured = False
    else:
        favoured = (f.get("cluster_m", 1) > 1 if _cluster_along_m_pays(problem, f)
                    else f.get("cluster_n", 1) > 1)
    scale = fx("cluster_gain") if favoured else 1.0
    # the tall-tile cost is the kernel's (its M in rows of 64 per warpgroup), so a swapped 128x256
    # tile pays it and a swapped 256x128 does not
    kernel_tile = (f["block_n"], f["block_m"]) if f.get("swap_ab") else (f["block_m"], f["block_n"])
    if kernel_tile == (256, 128):
        scale *= fx("tall_tile_factor")
    if f.get("swap_ab"):
        scale *= fx("swap_ab_factor")
    if f.get("decomposition") == "stream_k":
        scale *= fx("stream_k_factor")
    if f.get("warp_specialization") == "pingpong":
        scale *= fx("pingpong_factor")
    return scale


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)
