"""GemmConfig: every compile-time choice of the Hopper GEMM kernel, as plain Python values.

The kernel (gemm.py) reads these through `cutlass.const_expr`, so each field selects code at trace
time and never costs an instruction. The backend (cudal2/codegen/cute_dsl.py) builds one from a
(problem, spec) pair: the problem as the kernel sees it (with swap_ab, the transposed product), the
spec's tile, pipeline and warp roles, and the few derived choices the backend makes for it.

Extents: `m`, `n`, `k` hold the problem's extents for a kernel compiled for one shape, or None for a
shape-generic kernel, which takes them at run time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

THREADS_PER_WG = 128
SMEM_ALIGN = 1024  # 128B-swizzled TMA tiles want 1 KiB aligned buffers
RED_THREADS = 256  # split-K reduction threads per block


def epilogue_piece_width(tile_n: int) -> int:
    """Columns of one staged output piece of the TMA-store epilogue: 32, or 16 where 32 does not
    divide the tile's width (208, 240, ...), so every piece lies inside its tile."""
    return 32 if tile_n % 32 == 0 else min(16, tile_n)


def whole_tiles(m: int, n: int, tile_m: int, tile_n: int, cluster_m: int, cluster_n: int) -> bool:
    """Whether every CTA's tile lies inside an m x n output: no tile crosses an edge, and no cluster
    reaches past one. A CTA of an overhanging cluster (cluster 1x2 over a single column of tiles)
    holds a tile wholly outside, so split-K partials stored unpredicated would land outside the
    workspace (measured on the H100: wrong results, and other buffers overwritten)."""
    return (m % tile_m == 0 and n % tile_n == 0
            and (m // tile_m) % cluster_m == 0 and (n // tile_n) % cluster_n == 0)


@dataclass(frozen=True)
class GemmConfig:
    # ---- the problem, in the kernel's view -------------------------------------------------------
    m: int | None
    n: int | None
    k: int | None
    ab_dtype: str  # the DSL's type name: "Float16" or "BFloat16"
    d_dtype: str
    a_row_major: bool  # A (M, K): row-major = K-major in shared memory
    b_row_major: bool  # B (K, N): row-major = N-major; column-major = K-major
    alpha: float
    beta: float
    has_bias: bool
    activation: str  # "none", "relu", "gelu" or "silu"
    # the kernel's A and B are the caller's B^T and A^T, its (M, N) output D^T is written column-major
    # (which is the caller's row-major D), and the bias runs along its M
    swap_ab: bool
    # ---- the spec --------------------------------------------------------------------------------
    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    cluster_m: int
    cluster_n: int
    consumer_wgs: int
    # cooperative: the consumer warpgroups split each tile along M; ping-pong: two consumer warpgroups
    # take alternate tiles, so one's epilogue overlaps the other's main loop
    pingpong: bool
    producer_regs: int  # setmaxnreg
    consumer_regs: int
    # clusters per rasterization group (a divisor of the clusters across the raster: the DSL's scheduler
    # pads that count to a multiple of the group and runs the padding tiles)
    raster_group: int
    raster_along_m: bool
    # the backend's grouped walk (any shape, the last group narrower) instead of the DSL's static
    # scheduler: shape-generic kernels, and static ones whose group no cluster count divides
    grouped_walk: bool
    epilogue: str  # "registers": st.global from the fragment; "tma_store": through shared memory
    decomposition: str  # "data_parallel", "split_k" or "stream_k"
    split_k: int
    # ---- choices the backend derives --------------------------------------------------------------
    epi_stages: int  # output pieces staged in shared memory for the TMA store
    red_vec: int  # split-K reduction: outputs per thread, RED_THREADS apart
    whole_tiles: bool  # split-K partials: no tile crosses an edge, so adjacent columns leave together
    sm_count: int  # stream-K: the most CTAs its workspace has slots for
    # programmatic dependent launch: the kernel may start while the previous kernel on its stream
    # finishes; it sets up (descriptor prefetch, barriers, shared memory) and then waits for that
    # kernel's writes before touching global memory, and lets the next kernel start once its own
    # main loops are done
    pdl: bool = True

    def replace(self, **changes) -> "GemmConfig":
        return dataclasses.replace(self, **changes)

    # ---- derived ---------------------------------------------------------------------------------
    @property
    def mma_wgs(self) -> int:
        """Warpgroups computing one tile: one with ping-pong, every consumer otherwise."""
        return 1 if self.pingpong else self.consumer_wgs

    @property
    def threads(self) -> int:
        return (1 + self.consumer_wgs) * THREADS_PER_WG

    @property
    def mma_threads(self) -> int:
        return self.mma_wgs * THREADS_PER_WG

    @property
    def epi_buffers(self) -> int:
        """Staged output pieces in shared memory: one set, which ping-pong's warpgroups share (their
        epilogues take turns, and each drains its stores' reads before it passes the turn)."""
        return self.epi_stages

    @property
    def epi_tile(self) -> tuple[int, int]:
        return (min(self.tile_m, 64 * self.mma_wgs), epilogue_piece_width(self.tile_n))

    @property
    def tma_store(self) -> bool:
        return self.epilogue == "tma_store"

    @property
    def split(self) -> bool:
        return self.decomposition == "split_k"

    @property
    def stream_k(self) -> bool:
        return self.decomposition == "stream_k"

    @property
    def has_workspace(self) -> bool:
        return self.split or self.stream_k

    @property
    def needs_coords(self) -> bool:
        """The epilogue reads C or the bias at each output's coordinates."""
        return self.has_bias or self.beta != 0

    @property
    def tile_elems(self) -> int:
        return self.tile_m * self.tile_n

    @property
    def cluster_size(self) -> int:
        return self.cluster_m * self.cluster_n

    @property
    def dynamic(self) -> bool:
        """Shape-generic: M, N and K are run-time values."""
        return self.m is None

    @property
    def tma_leading_extents(self) -> frozenset[str]:
        """The extents ("m", "n", "k") that are the leading dimension of a TMA'd tensor: A's, B's, and
        D's with the TMA store. TMA wants rows of a multiple of 16 bytes, so a shape-generic kernel
        serves only shapes where these are multiples of 8 elements (and is compiled knowing it)."""
        lead = {"k" if self.a_row_major else "m", "n" if self.b_row_major else "k"}
        if self.tma_store:
            lead.add("m" if self.swap_ab else "n")  # swap_ab: the kernel's D is column-major
        return frozenset(lead)
