"""CuTe DSL backend (nvidia-cutlass-dsl) for Hopper, sm_90a.

One kernel, cudal2/codegen/cute_sm90 (DSL Python specialized with const_expr by a GemmConfig; the
rendered module only binds that config): a persistent, warp-specialized kernel. A producer warpgroup
issues TMA loads into swizzled shared memory through an mbarrier pipeline of `stages`
stages (multicast across the CTAs of a cluster); one or two cooperative consumer warpgroups
run WGMMA with fp32 accumulators; a static persistent tile scheduler walks the output tiles
in grouped rasterization; the epilogue applies alpha, beta * C, bias and relu/gelu/silu on
the fp32 fragment and stores either straight from registers (predicated) or through
shared memory with a TMA store. With shape_specialization="static" the config bakes every extent in
and one compiled kernel serves one (problem, spec); with "dynamic" M, N, K and the leading dimensions
are runtime values and one compiled kernel serves every shape of its dtype, layout, alignment class
and epilogue (shape_refusal() says which calls it cannot take).

Split-K (decomposition="split_k", split_k=S, reduction "workspace"): the scheduler's work units
are (output tile, K slice) pairs; each stores its raw fp32 partial tile into an fp32 workspace
(S, M, N) that the kernel object allocates once per device, and a second kernel, launched right
after on the same stream, sums the S slices in a fixed order and applies the epilogue.

Stream-K (decomposition="stream_k"): whole data-parallel waves, then the leftover tiles' k-iterations
shared evenly by every cluster; the CTAs of a cluster walk the same k-range of neighbouring tiles, so
their multicast loads stay in step. Partial tiles go through a per-CTA fp32 workspace slot and flag
to the CTA that owns the tile's first k-iteration (cute_sm90/scheduler.py says more).

Compiled kernels are cached in memory per process and on disk: the DSL can export a
compiled function as an object file (`export_to_c`) and load it back in another process
(`cute.runtime.load_module`), which is what precompile() relies on. The DSL compiles for
sm_90a without a GPU when CUTE_DSL_ARCH=sm_90a is set (compile(), precompile() and the CPU
tests set it when no GPU is visible).

Why this module runs past 600 lines: it holds the backend's capability rules (what the kernel
can compute, with the reason for each refusal) next to the config they guard; the kernel itself
is the cute_sm90 package.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import sys
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from cudal2.settings import settings
from ..ir import Capabilities, GemmProblem, KernelSpec, Violation, arch_limits, options
from ..ir.hardware import TILE_WIDTHS
from ..ir.spec import stage_bytes
from .base import Backend, Source, Support
from .cute_sm90.config import GemmConfig, epilogue_piece_width, whole_tiles
from .cute_sm90.kernel import MAX_ELEMENTS, MAX_WORKSPACE_BYTES, CuteDslKernel, largest_operand
from .. import paths

# K slices the split-K kernel takes (the IR allows 1..64; the kernel handles uneven division).
SPLIT_K_VALUES = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 32, 48, 64]

# Tile widths the kernel takes along its N: every WGMMA width (hardware.TILE_WIDTHS) that its TMA-store
# epilogue cuts into whole pieces of 16 or 32 columns (stmatrix stores 16 at the finest).
KERNEL_WIDTHS = [w for w in TILE_WIDTHS if w % 16 == 0]


# Output pieces in flight through shared memory with the TMA store: the first count that fits beside
# the spec's main-loop stages. Two instead of four frees the shared memory that lets 192-wide tiles
# (40 KiB a stage) run the 5 stages cuBLAS gives its 128x192 kernel on 12288x256x16384. Ping-pong's
# two warpgroups, whose epilogues take turns, share one set of twice as many (the same bytes): a
# 128x128 tile's eight pieces are then all in flight, and no piece waits for an earlier one's store.
EPILOGUE_STAGES = (4, 2)
BARRIER_BYTES = 1024  # the kernel's mbarriers and scheduler words


def _epilogue_piece_bytes(f: Mapping[str, Any]) -> int:
    """One staged output piece: (64 rows per consumer warpgroup of the tile) x (32 columns) fp16."""
    pingpong = f["warp_specialization"] == "pingpong"
    wgs = 1 if pingpong else f["num_warps"] // 4 - 1  # warpgroups sharing a tile, less the producer
    rows, cols = (f["block_n"], f["block_m"]) if f.get("swap_ab") else (f["block_m"], f["block_n"])
    return min(rows, 64 * wgs) * epilogue_piece_width(cols) * 2


def epilogue_stages(f: Mapping[str, Any]) -> int:
    """How many output pieces the TMA-store epilogue of a spec (given as its fields) keeps in flight:
    the most of EPILOGUE_STAGES that fit in shared memory beside its main-loop stages and barriers
    (twice as many with ping-pong, one set its warpgroups share)."""
    room = arch_limits(f["arch"]).smem_per_block - BARRIER_BYTES - f["stages"] * stage_bytes(f)
    piece = _epilogue_piece_bytes(f)
    counts = tuple(2 * n for n in EPILOGUE_STAGES) if f["warp_specialization"] == "pingpong" else EPILOGUE_STAGES
    return next((n for n in counts if n * piece <= room), counts[-1])


def epilogue_smem_bytes(f: Mapping[str, Any]) -> int:
    """Shared memory of the TMA-store epilogue, from a spec's fields: epilogue_stages pieces, not
    the whole tile (the IR's default estimate)."""
    if f["epilogue_path"] != "tma_store":
        return 0
    return _epilogue_piece_bytes(f) * epilogue_stages(f)


# What the kernel implements; the IR validator refuses everything else for this backend.
CAPABILITIES = Capabilities(
    options=options(
        arch=["sm_90a"],
        # The kernel's N takes any WGMMA width its epilogue stores in whole pieces (KERNEL_WIDTHS);
        # its M is cut in rows of 64 per consumer warpgroup (192 rows take three, num_warps=16).
        # Which of D's dimensions is the kernel's M depends on swap_ab, so both list every width and
        # _kernel_violations refuses what the kernel cannot split.
        block_m=KERNEL_WIDTHS,
        block_n=KERNEL_WIDTHS,
        block_k=[32, 64, 128],
        num_warps=[8, 12, 16],  # 1 producer warpgroup + 1, 2 or 3 consumer warpgroups
        mma=["auto", "wgmma"],
        cluster_m=[1, 2],
        cluster_n=[1, 2],
        load_path=["tma"],
        warp_specialization=["cooperative", "pingpong"],
        smem_swizzle=["auto"],  # the swizzle follows from the tile's major extent (128B for 64+ fp16)
        smem_padding=[0],
        decomposition=["data_parallel", "split_k", "stream_k"],
        split_k=SPLIT_K_VALUES,
        split_k_reduction=["workspace"],  # deterministic; no atomics (lost updates seen on H100 elsewhere)
        persistent=[True],
        epilogue_path=["registers", "tma_store"],
        epilogue_subtile=[1],
        swap_ab=[False, True],
        # static: every extent baked in; dynamic: one kernel for every M, N, K of the problem's class
        # whose TMA'd leading dimensions are multiples of 8 (auto: static, until the GPU shows dynamic
        # kernels within noise of static ones)
        shape_specialization=["auto", "static", "dynamic"],
        # One stage hung on the H100: the producer/consumer pipeline needs two stages to overlap at
        # all, so one is not offered.
        # small tiles on deep K want deep pipelines: cuBLAS runs 64x32 tiles with 16 stages
        stages=list(range(2, 17)),
        # setmaxnreg: the producer gives registers back (ptxas refuses a decrease above what the
        # program uses, "setmaxnreg.dec has register count ... which is larger than ...", so only
        # counts that compile are declared), the consumers take them. None = the kernel's defaults
        # (default_producer_registers, default_consumer_registers: 40 / 232, 24 / 240 for a tile whose
        # accumulators need it, or what three consumer warpgroups can have).
        producer_registers=[None, 24, 32, 40, 48, 56],
        consumer_registers=[None, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240],
        **{"problem.accumulator": ["float32"], "problem.dtype": ["float16", "bfloat16"]},
    ),
    epilogue_smem=epilogue_smem_bytes,
)

DEFAULT_PRODUCER_REGISTERS = 40
DEFAULT_CONSUMER_REGISTERS = 232
# A producer warpgroup issues TMA loads and needs few registers: 24 frees 16 more per thread for each of
# two consumer warpgroups (240), what a 128x208 ping-pong or a 256x208 cooperative tile needs.
LEAN_PRODUCER_REGISTERS = 24
MAX_CONSUMER_REGISTERS = 240
ACC_RESERVE = 32  # registers a consumer thread keeps beside its accumulators: addresses, loop state, epilogue
# Three consumer warpgroups: ptxas compiled 192x192 (96 accumulators a thread) and refused 192x208, 192x224
# and 192x240 ("Insufficient registers (128)"), compiling for sm_90a on a CPU and in a precompile run on the
# H100 (2026-11-27), which set aside 33 such specs of 1761; the general rule above let them through (<= 120)
THREE_WG_MAX_ACCUMULATORS = 96
REGISTERS_PER_SM = 65536
MAX_REGISTERS_PER_THREAD = 255
DSL_NAMES = {"float16": "Float16", "bfloat16": "BFloat16"}

def effective_raster_group(problem: GemmProblem, spec: KernelSpec) -> int:
    """The largest group size <= spec.raster_group that divides the number of clusters across the
    raster direction. The DSL's StaticPersistentTileScheduler rounds that count up to a multiple of
    the group and schedules the padding tiles too (its validity test is against the padded count),
    so a group that does not divide it makes the kernel compute whole tiles outside the output:
    1 of 8 real N-tiles with group 8 is 8x the work, which made shapes with few tiles across the
    raster several times slower than torch on the H100."""
    across = clusters_across_raster(problem, spec)
    return max(g for g in range(1, spec.raster_group + 1) if across % g == 0)


def clusters_across_raster(problem: GemmProblem, spec: KernelSpec) -> int:
    """Clusters of output tiles across the raster direction (what raster groups are cut from)."""
    tiles_m = -(-problem.m // spec.block_m)
    tiles_n = -(-problem.n // spec.block_n)
    return -(-tiles_n // spec.cluster_n) if spec.raster_order == "along_m" else -(-tiles_m // spec.cluster_m)


def needs_grouped_walk(problem: GemmProblem, spec: KernelSpec) -> bool:
    """Whether a kernel compiled for problem walks its tiles with the backend's own grouped walk
    (scheduler.GroupedTileScheduler, whose last group is as wide as what is left) instead of the DSL's
    static scheduler: where no divisor of the clusters across the raster reaches the spec's group. A
    prime count cuts the group to 1 there, and an ungrouped walk over a large output reads one operand
    from DRAM once per column of tiles (43 clusters across on 16384x16384 with 192-wide tiles)."""
    return effective_raster_group(problem, spec) < min(spec.raster_group, clusters_across_raster(problem, spec))


def kernel_view(problem: GemmProblem, spec: KernelSpec) -> tuple[GemmProblem, KernelSpec]:
    """The (problem, spec) the kernel computes. As given; or, with swap_ab, the transposed
    product D^T = B^T A^T: M and N trade places, each operand becomes the other one transposed
    (NN -> TT, TT -> NN; NT and TN stay), and the tile, cluster and raster fields trade M for N.
    The kernel's output is then D^T in column-major order, which is D's own row-major memory, and
    the bias runs along the kernel's M (the kernel's swap_ab branches)."""
    if not spec.swap_ab:
        return problem, spec
    flip = {"N": "T", "T": "N"}
    kproblem = problem.replace(m=problem.n, n=problem.m, layout=flip[problem.layout[1]] + flip[problem.layout[0]])
    return kproblem, _swapped(spec)


@lru_cache(maxsize=1 << 16)
def _swapped(spec: KernelSpec) -> KernelSpec:
    """spec with M and N traded (kernel_view); kept, as planning asks it of every catalog spec for every shape."""
    return spec.replace(block_m=spec.block_n, block_n=spec.block_m, cluster_m=spec.cluster_n,
                        cluster_n=spec.cluster_m, swap_ab=False,
                        raster_order="along_n" if spec.raster_order == "along_m" else "along_m")


def gemm_config(problem: GemmProblem, spec: KernelSpec) -> GemmConfig:
    """The kernel's GemmConfig for a (problem, spec) pair: the kernel's view of both (kernel_view) and
    the choices this backend derives for it."""
    kproblem, kspec = kernel_view(problem, spec)
    e = kproblem.epilogue
    sm_count = arch_limits(kspec.arch).sm_count
    dynamic = spec.shape_specialization == "dynamic"
    walk = dynamic or needs_grouped_walk(kproblem, kspec)
    return GemmConfig(
        m=None if dynamic else kproblem.m, n=None if dynamic else kproblem.n, k=None if dynamic else kproblem.k,
        ab_dtype=DSL_NAMES[kproblem.dtype], d_dtype=DSL_NAMES[kproblem.c_dtype],
        a_row_major=kproblem.a_row_major, b_row_major=kproblem.b_row_major,
        alpha=float(e.alpha), beta=float(e.beta), has_bias=bool(e.bias), activation=e.activation,
        swap_ab=spec.swap_ab,
        tile_m=kspec.block_m, tile_n=kspec.block_n, tile_k=kspec.block_k, stages=kspec.stages,
        cluster_m=kspec.cluster_m, cluster_n=kspec.cluster_n, consumer_wgs=kspec.consumer_warps // 4,
        pingpong=kspec.warp_specialization == "pingpong",
        producer_regs=kspec.producer_registers or default_producer_registers(kspec),
        consumer_regs=kspec.consumer_registers or default_consumer_registers(kspec),
        raster_group=kspec.raster_group if walk else effective_raster_group(kproblem, kspec),
        raster_along_m=kspec.raster_order == "along_m",
        grouped_walk=walk,
        epilogue=kspec.epilogue_path, decomposition=kspec.decomposition, split_k=kspec.split_k,
        epi_stages=epilogue_stages(dict(kspec)),
        **split_k_variant(kproblem, kspec),
        sm_count=sm_count,
    )


def split_k_variant(kproblem: GemmProblem, kspec: KernelSpec) -> dict[str, Any]:
    """The split-K choices that follow from the kernel's extents (a shape-generic kernel is compiled
    once per combination: variant_key)."""
    split = kspec.decomposition == "split_k"
    sm_count = arch_limits(kspec.arch).sm_count
    return {
        # the reduction: 4 outputs per thread once that still leaves two waves of blocks
        "red_vec": 4 if split and kproblem.m * kproblem.n >= 2 * sm_count * 256 * 4 else 1,
        # partials leave unpredicated, adjacent columns together, when every CTA's tile is inside
        "whole_tiles": split and whole_tiles(kproblem.m, kproblem.n, kspec.block_m, kspec.block_n,
                                             kspec.cluster_m, kspec.cluster_n),
    }


@lru_cache(maxsize=1)
def kernel_source_digest() -> str:
    """A digest of the kernel package's source: part of every compiled kernel's cache key, so an
    artifact compiled from other kernel code is never loaded."""
    import hashlib

    root = Path(__file__).with_name("cute_sm90")
    h = hashlib.sha256()
    for f in sorted(root.glob("*.py")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _in_d_terms(v: Violation) -> Violation:
    """A violation found on the swapped kernel view, told in the spec's own (D's) field names."""
    swap = lambda text: re.sub(r"\b(block|cluster)_([mn])\b",  # noqa: E731
                               lambda g: f"{g[1]}_{'n' if g[2] == 'm' else 'm'}", text)
    return Violation(swap(v.field), v.value,
                     f"{v.limit} (swap_ab: the kernel's M runs along D's N)",
                     swap(v.fix).replace("swap_ab=True", "swap_ab=False"))


def dsl_available() -> tuple[bool, str]:
    """Whether nvidia-cutlass-dsl imports here, and why not."""
    _ensure_arch_for_cpu()  # importing the DSL fixes its target arch
    try:
        import cutlass  # noqa: F401
        import cutlass.cute  # noqa: F401
    except Exception as e:  # ImportError, or a broken/partial install (missing runtime library)
        return False, f"nvidia-cutlass-dsl is not importable ({type(e).__name__}: {e}); {CuteDslBackend.install_line()}"
    return True, ""


def _ensure_arch_for_cpu() -> None:
    """Settings the DSL reads once, when first imported. Its IR cache goes under cudal2's cache folder
    unless the caller names one ($CUTE_DSL_CACHE_DIR; the DSL's own default is a folder it makes in
    $TMPDIR), and it compiles for the GPU it sees, or without one for CUTE_DSL_ARCH (sm_90a)."""
    if not os.environ.get("CUTE_DSL_CACHE_DIR"):
        os.environ["CUTE_DSL_CACHE_DIR"] = str(_cache_root() / "ir")
    if os.environ.get("CUTE_DSL_ARCH"):
        return
    try:
        import torch

        if torch.cuda.is_available():
            return
    except Exception:
        pass
    os.environ["CUTE_DSL_ARCH"] = "sm_90a"


def _cache_root() -> Path:
    """Where rendered modules and exported kernels are kept: cute_dsl/ in cudal2's cache folder."""
    return paths.cache_dir() / "cute_dsl"


class CuteDslBackend(Backend):
    name = "cute_dsl"
    # 5: ping-pong's warpgroups share one set of staged output pieces, twice as deep; a piece waits
    # for an earlier store only where it reuses its buffer; the producer alone waits for the previous
    # grid (PDL); the first WGMMA sets the accumulators. 4: ping-pong skips the other warpgroup's
    # stages in one step; 3: the grouped walk
    version = "5"
    requirements = ("nvidia-cutlass-dsl==4.8.1", "apache-tvm-ffi>=0.1.15.post2")  # as the `cute` extra
    language = "python"
    capabilities = CAPABILITIES
    templates = {"sm90_ws": "gemm_sm90.py.j2"}

    def __init__(self) -> None:
        self._compiled: dict[str, CuteDslKernel] = {}
        self._lock = threading.Lock()

    # ---- what this backend can run ------------------------------------------------------------
    def supports(self, problem: GemmProblem, spec: KernelSpec) -> Support:
        base = super().supports(problem, spec)
        if not base:
            return base
        bad = _swap_violations(problem, spec)
        if not bad:
            kproblem, kspec = kernel_view(problem, spec)
            bad = _kernel_violations(kproblem, kspec)
            if spec.swap_ab:
                bad = [_in_d_terms(v) for v in bad]
        if bad:
            return Support(False, "; ".join(str(v) for v in bad))
        return Support(True)

    @staticmethod
    def dynamic(spec: KernelSpec) -> bool:
        return spec.shape_specialization == "dynamic"

    def shape_key(self, problem: GemmProblem, spec: KernelSpec) -> str:
        return problem.class_key() if self.dynamic(spec) else problem.key()

    def variant_key(self, problem: GemmProblem, spec: KernelSpec) -> str:
        """A shape-generic split-K kernel is compiled per reduction width and tile evenness."""
        if not self.dynamic(spec) or spec.decomposition != "split_k":
            return ""
        v = split_k_variant(*kernel_view(problem, spec))
        return f"r{v['red_vec']}{'w' if v['whole_tiles'] else 'e'}"

    def render(self, problem: GemmProblem, spec: KernelSpec) -> Source:
        # the module's host entry is entry() (a kernel object for cute.compile), not a launcher
        return dataclasses.replace(super().render(problem, spec), entry="entry")

    def context(self, problem: GemmProblem, spec: KernelSpec) -> dict[str, Any]:
        """The thin module binds the kernel's GemmConfig, built from the kernel's view (kernel_view):
        with swap_ab its problem and spec are the transposed ones."""
        config = gemm_config(problem, spec)
        kproblem = kernel_view(problem, spec)[0]
        # a shape-generic module names the class it serves, so its text (the cache key) is one per class
        label = (lambda p: p.class_label()) if self.dynamic(spec) else (lambda p: p.label())
        return {"backend_version": self.version, "d_problem_label": label(problem), "d_spec_key": spec.key(),
                "swap_ab": spec.swap_ab, "kernel_label": label(kproblem),
                "config": [(f.name, repr(getattr(config, f.name))) for f in dataclasses.fields(config)]}

    def usable(self) -> tuple[bool, str]:
        """Whether the DSL is installed (found without importing it: importing fixes its target
        arch and cache folder, which compile() sets first)."""
        if importlib.util.find_spec("cutlass") is None:
            return False, "nvidia-cutlass-dsl is not installed"
        return True, ""

    def toolchain_version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        parts = []
        for dist in ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-cu12", "nvidia-cutlass-dsl-libs-cu13"):
            try:
                parts.append(f"{dist}=={version(dist)}")
            except PackageNotFoundError:
                pass
        dsl = ",".join(parts) or "nvidia-cutlass-dsl (unpacked, version unknown)"
        return f"{dsl},kernel={kernel_source_digest()}"

    # ---- compilation ----------------------------------------------------------------------------
    def _module_for(self, source: Source):
        """Write the rendered text to the cache and import it under a unique name."""
        key = self.cache_key(source)
        root = _cache_root()
        root.mkdir(parents=True, exist_ok=True)
        path = root / f"gemm_{key}.py"
        if not path.exists() or path.read_text() != source.text:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(source.text)
            os.replace(tmp, path)
        name = f"cudal2_cute_dsl_{key}"
        if name in sys.modules:
            return sys.modules[name], key, root
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module, key, root

    @staticmethod
    def _max_active_clusters(spec: KernelSpec) -> int:
        """Persistent grid size in clusters: from the live GPU when there is one, else the arch table.
        (A grid larger than what fits stays correct but runs its extra clusters as a second wave.)"""
        return _max_active_clusters(spec.cluster_m * spec.cluster_n, arch_limits(spec.arch).sm_count)

    def _compile_module(self, module, mac: int, ffi: bool = False):
        import cutlass.cute as cute

        args = module.BINDING.example_args(mac)
        if ffi:
            return cute.compile(module.BINDING.entry(), *args, options="--enable-tvm-ffi")
        return cute.compile(module.BINDING.entry(), *args)

    def compile(self, source: Source) -> CuteDslKernel:
        _ensure_arch_for_cpu()  # before the DSL is first imported: it reads the arch once
        ok, why = dsl_available()
        if not ok:
            raise RuntimeError(f"cute_dsl backend unavailable: {why}")
        mac = self._max_active_clusters(source.spec)
        module, key, root = self._module_for(source)
        ffi = tvm_ffi_version()
        suffix = f"_ffi{re.sub(r'[^0-9A-Za-z]', '_', ffi)}" if ffi else ""
        mem_key = f"{key}-{mac}{suffix}"
        with self._lock:
            hit = self._compiled.get(mem_key)
            if hit is not None:
                return hit
            obj = root / f"gemm_{key}_c{mac}{suffix}.o"
            fn, from_disk, binary = None, False, None
            if obj.exists() and settings().cute_dsl_disk_cache:
                try:
                    import cutlass.cute as cute

                    binary = cute.runtime.load_module(str(obj), enable_tvm_ffi=bool(ffi))
                    fn = binary.gemm
                    from_disk = True
                except Exception:  # stale or foreign artifact: compile afresh
                    fn, binary = None, None
            if fn is None:
                fn = self._compile_module(module, mac, ffi=bool(ffi))
                _export(fn, obj, ffi=bool(ffi))
            kernel = CuteDslKernel(source=source, _fn=fn, _binding=module.BINDING, loaded_from_disk=from_disk,
                                  _keepalive=binary, ffi=bool(ffi))
            self._compiled[mem_key] = kernel
            return kernel

    def record_device_facts(self, device: str) -> None:
        """The persistent grid of each cluster size, asked of this GPU and recorded for the compile
        processes (see _max_active_clusters); only on a Hopper GPU, which this backend compiles for."""
        import torch

        if not torch.cuda.is_available() or torch.cuda.get_device_capability(device) != (9, 0):
            return
        torch.empty(1, device=device)  # the occupancy query needs a CUDA context
        with torch.cuda.device(device):
            for size in cluster_sizes():
                _max_active_clusters(size, arch_limits("sm_90a").sm_count)

    def precompile(self, source: Source) -> None:
        """Compile for sm_90a (no GPU needed) and export the object file that compile() then loads.
        The grid size is part of the artifact: the GPU worker's record of it (_max_active_clusters),
        else the arch table's count, which on an H100 SXM matches clusters of 1 and 2, not of 4."""
        self.compile(source)


# (cluster size, the arch table's SM count) -> clusters that fit at once, as recorded or asked of the
# live GPU; never the table's estimate, which a record written later replaces
_ACTIVE_CLUSTERS: dict[tuple[int, int], int] = {}


def _max_active_clusters(cluster_size: int, table_sm_count: int) -> int:
    """Clusters of cluster_size CTAs the GPU runs at once: the persistent grid, compiled into the
    kernel and its object file's name. The DSL's occupancy query builds a probe kernel and needs a
    CUDA context: a process that holds one (the GPU worker, a program running the kernels) asks it
    and records the answer on disk per device name; a compile process, which holds none, reads the
    record. Without either it takes the arch table's count for this call only. (On an H100 the
    table says 33 clusters of 4 where 30 fit: compile processes that kept the table's count built
    every 2x2-cluster kernel for a grid the GPU worker did not ask for, and the worker compiled
    each one again, 1.7 s apiece, while the GPU waited.)"""
    key = (cluster_size, table_sm_count)
    if key in _ACTIVE_CLUSTERS:
        return _ACTIVE_CLUSTERS[key]
    table = table_sm_count // cluster_size
    try:
        import torch

        if not torch.cuda.is_available():
            return table
        memo = _cache_root() / "max_active_clusters.json"
        name = f"{torch.cuda.get_device_name()}|{cluster_size}"
        try:
            known = json.loads(memo.read_text())
        except (OSError, ValueError):
            known = {}
        if name not in known:
            import cutlass.utils

            known[name] = int(cutlass.utils.HardwareInfo().get_max_active_clusters(cluster_size))  # needs a context
            memo.parent.mkdir(parents=True, exist_ok=True)
            tmp = memo.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(known))
            os.replace(tmp, memo)
        _ACTIVE_CLUSTERS[key] = int(known[name])
        return _ACTIVE_CLUSTERS[key]
    except Exception:  # noqa: BLE001 - no context and no record yet: the table, not kept
        return table


def cluster_sizes() -> tuple[int, ...]:
    """The CTAs per cluster this backend's specs may ask for (cluster_m x cluster_n)."""
    ms, ns = CAPABILITIES.allowed("cluster_m", "sm_90a") or (1,), CAPABILITIES.allowed("cluster_n", "sm_90a") or (1,)
    return tuple(sorted({m * n for m in ms for n in ns}))


def tvm_ffi_version() -> str:
    """The apache-tvm-ffi version kernels are compiled against, or "" to use the DSL's own executor:
    without the package, or with CUDAL2_TVM_FFI=0. Through TVM-FFI a launch takes plain ints and
    costs about a microsecond of host time; the DSL's executor converts each argument in Python."""
    if not settings().tvm_ffi:
        return ""
    try:
        import tvm_ffi
    except ImportError:
        return ""
    return str(getattr(tvm_ffi, "__version__", "unknown"))


def _export(fn, obj: Path, ffi: bool = False) -> None:
    """Export the compiled function as an object file next to its source (best effort)."""
    if not settings().cute_dsl_disk_cache:
        return
    try:
        tmpdir = obj.parent
        stem = obj.stem + f".{os.getpid()}"
        if ffi:
            fn.export_to_c(str(tmpdir / f"{stem}.o"), function_name="gemm")
        else:
            fn.export_to_c(file_path=str(tmpdir), file_name=stem, function_prefix="gemm")
        os.replace(tmpdir / f"{stem}.o", obj)
        (tmpdir / f"{stem}.h").unlink(missing_ok=True)
    except Exception:
        pass  # the in-memory kernel is still good; the next process recompiles


def register_pool(spec: KernelSpec) -> int:
    """Registers a block holds for setmaxnreg to share out: what it is launched with, the per-thread
    count (a multiple of 8, at most 255, at most the SM's file over the block's threads) times its
    threads; not the SM's 65536. 384 threads launch with 168 each: 64512. setmaxnreg.inc beyond the
    pool never returns: a 48-register producer beside 232-register consumers (65536 in all) hung
    on the H100."""
    threads = 32 * spec.num_warps
    per_thread = min(MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM // threads) // 8 * 8
    return per_thread * threads


def accumulators(spec: KernelSpec) -> int:
    """fp32 accumulator registers per consumer thread: the tile over the threads that compute it (one
    warpgroup with ping-pong, every consumer warpgroup cooperatively)."""
    mma_warps = 4 if spec.warp_specialization == "pingpong" else spec.consumer_warps
    return spec.block_m * spec.block_n // (32 * mma_warps)


def _consumer_share(spec: KernelSpec, producer: int, cap: int) -> int:
    """What the register pool leaves each consumer thread next to a producer of `producer`, at most cap."""
    return min(cap, (register_pool(spec) - 128 * producer) // (32 * spec.consumer_warps) // 8 * 8)


def default_producer_registers(spec: KernelSpec) -> int:
    """The producer's count when the spec leaves it to the kernel: 40, or 24 for two consumer
    warpgroups when the spec sets no consumer count either and the tile's accumulators need the
    registers that frees. (Three consumer warpgroups launch with 128 registers a thread, and ptxas
    refused a 192x256 tile there even with 160 after setmaxnreg: "Insufficient registers (128)".)"""
    if spec.consumer_registers is None and spec.consumer_warps == 8 and accumulators(spec) + ACC_RESERVE > \
            _consumer_share(spec, DEFAULT_PRODUCER_REGISTERS, DEFAULT_CONSUMER_REGISTERS):
        return LEAN_PRODUCER_REGISTERS
    return DEFAULT_PRODUCER_REGISTERS


def default_consumer_registers(spec: KernelSpec) -> int:
    """Registers per consumer thread when the spec leaves it to the kernel: 232 next to a 40-register
    producer, 240 next to a 24-register one, or what the pool leaves each of three consumer
    warpgroups (152 next to a 40-register producer), or fewer next to a producer that keeps more."""
    producer = spec.producer_registers or default_producer_registers(spec)
    cap = MAX_CONSUMER_REGISTERS if producer <= LEAN_PRODUCER_REGISTERS else DEFAULT_CONSUMER_REGISTERS
    return _consumer_share(spec, producer, cap)


def _swap_violations(problem: GemmProblem, spec: KernelSpec) -> list[Violation]:
    """What swap_ab does not cover (yet): the split-K and stream-K workspaces and the split-K
    reduction index a row-major kernel output, and the DSL compiler's abort below."""
    if not spec.swap_ab:
        return []
    bad = []
    if spec.decomposition != "data_parallel":
        bad.append(Violation("swap_ab", True, f"the {spec.decomposition} workspace is laid out for an unswapped "
                             "kernel", "use swap_ab=False with split-K or stream-K, or decomposition='data_parallel'"))
    if spec.consumer_warps == 12 and spec.warp_specialization == "cooperative" and spec.epilogue_path == "tma_store":
        # The DSL's compiler aborts the process (SIGABRT, no message) on the column-major output
        # tile of 192 rows that three warpgroups store together: found by an H100 search whose
        # compile pool it broke (8192x256x256, 128x192 w16), and reproduced on the CPU
        bad.append(Violation("epilogue_path", "tma_store", "with swap_ab, three consumer warpgroups store a "
                             "column-major 192-row output tile, which the CuTe DSL compiler aborts on",
                             "use epilogue_path='registers', or num_warps=12 with swap_ab=True"))
    return bad


def _kernel_violations(problem: GemmProblem, spec: KernelSpec) -> list[Violation]:
    """Limits of this kernel beyond the declared option sets."""
    bad = list(_tile_violations(spec))
    if problem.dtype != problem.c_dtype and problem.c_dtype not in DSL_NAMES:
        bad.append(Violation("problem.out_dtype", problem.out_dtype, "output must be float16 or bfloat16",
                             "use out_dtype float16 or bfloat16"))
    bad += _decomposition_violations(problem, spec)
    largest = largest_operand(problem.m, problem.n, problem.k)
    if largest > MAX_ELEMENTS:  # (refused here, not at the launch: a sweep recorded these as crashes)
        bad.append(Violation("problem", problem.label(), f"an operand of {largest} elements, over the {MAX_ELEMENTS} "
                             "that the kernel's 32-bit extents and strides can index",
                             "use the triton backend or torch for this shape"))
    # TMA: 16-byte aligned leading dimensions are checked by check_compatible(); the output of a
    # TMA store too. Registers epilogue writes element by element, so any N works there.
    return bad


@lru_cache(maxsize=1 << 16)
def _tile_violations(spec: KernelSpec) -> tuple[Violation, ...]:
    """The limits that depend on the spec alone (warpgroups, registers, shared memory): kept, as
    planning asks them of every catalog spec for every shape."""
    bad: list[Violation] = []
    pingpong = spec.warp_specialization == "pingpong"
    wgs = 1 if pingpong else spec.consumer_warps // 4  # warpgroups sharing one tile
    if spec.block_m % (64 * wgs):
        fit = [f"num_warps={4 + 4 * w}" for w in (1, 2, 3) if spec.block_m % (64 * w) == 0]
        # (a width WGMMA takes as N, such as 96 or 32, fits the other way round)
        fit = fit or ["swap_ab=True, which puts block_m along the WGMMA's N"]
        bad.append(Violation("block_m", spec.block_m,
                             f"{wgs} cooperative consumer warpgroups split the tile along M in rows of 64",
                             f"use block_m a multiple of {64 * wgs}, or " + " or ".join(fit)))
    if pingpong and spec.consumer_warps != 8:
        bad.append(Violation("num_warps", spec.num_warps, "ping-pong has exactly two consumer warpgroups",
                             "use num_warps=12 with warp_specialization='pingpong'"))
    producer = spec.producer_registers or default_producer_registers(spec)
    most = default_consumer_registers(spec)  # what the pool leaves each consumer thread
    consumer = spec.consumer_registers or most
    total = 128 * producer + 32 * spec.consumer_warps * consumer
    if total > register_pool(spec):
        bad.append(Violation("consumer_registers", consumer,
                             f"setmaxnreg would give {total} registers to the block's warpgroups ({producer} per "
                             f"producer thread), more than the {register_pool(spec)} the block is launched with "
                             "(the kernel would wait forever for the rest)",
                             f"use consumer_registers <= {most} or leave it None"))
    acc = accumulators(spec)
    if acc > consumer - ACC_RESERVE:
        holder = "ping-pong gives each consumer warpgroup a whole tile" if pingpong else \
            f"{spec.consumer_warps // 4} consumer warpgroups share the tile"
        roomier = [] if consumer >= MAX_CONSUMER_REGISTERS else [
            f"producer_registers={LEAN_PRODUCER_REGISTERS} with consumer_registers={MAX_CONSUMER_REGISTERS}"]
        bad.append(Violation("block_m*block_n", spec.block_m * spec.block_n,
                             f"{holder}: {acc} fp32 accumulators per consumer thread leave fewer than "
                             f"{ACC_RESERVE} of its {consumer} registers for addresses and the epilogue",
                             "use " + ", ".join(roomier + ["a smaller tile", "more consumer warpgroups" if not pingpong
                                                           else "warp_specialization='cooperative'"])))
    if not pingpong and spec.consumer_warps == 12 and THREE_WG_MAX_ACCUMULATORS < acc <= consumer - ACC_RESERVE:
        bad.append(Violation("block_m*block_n", spec.block_m * spec.block_n,
                             f"three consumer warpgroups (512 threads) are compiled at the launch's 128 registers a "
                             f"thread, before setmaxnreg raises them: ptxas refuses {acc} fp32 accumulators there "
                             "('Insufficient registers (128)') and takes "
                             f"{THREE_WG_MAX_ACCUMULATORS}",
                             f"use block_m*block_n <= {THREE_WG_MAX_ACCUMULATORS * 32 * 12} with num_warps=16 "
                             "(192x192), or num_warps=12"))
    smem = spec.smem_bytes() + BARRIER_BYTES  # the IR's count (stages + epilogue buffers) and the barriers
    limit = arch_limits(spec.arch).smem_per_block
    if smem > limit:
        per = (spec.block_m + spec.block_n) * spec.block_k * 2
        bad.append(Violation("stages", spec.stages,
                             f"{smem / 1024:.1f} KiB of shared memory (stages + epilogue buffers + barriers) "
                             f"exceeds {limit / 1024:.0f} KiB",
                             f"use at most {(limit - (smem - spec.stages * per)) // per} stages or a smaller tile"))
    return tuple(bad)


def _decomposition_violations(problem: GemmProblem, spec: KernelSpec) -> list[Violation]:
    """What this kernel's split-K and stream-K decompositions cannot do."""
    bad: list[Violation] = []
    pingpong = spec.warp_specialization == "pingpong"
    if spec.decomposition == "split_k":
        if pingpong:
            # A search on the H100 lost a split_k=4 ping-pong kernel on 8192x8192x4096 to the check
            # timeout (it never finished), while small split-K ping-pong cases passed: not offered.
            bad.append(Violation("warp_specialization", "pingpong",
                                 "split-K with ping-pong consumers hung on an H100 (8192x8192x4096, split_k=4)",
                                 "use warp_specialization='cooperative' with decomposition='split_k'"))
        if spec.epilogue_path != "registers":
            bad.append(Violation("epilogue_path", spec.epilogue_path,
                                 "split-K stores fp32 partial tiles from registers into a workspace and a "
                                 "reduction kernel writes the output; there is no TMA-store variant of it",
                                 "use epilogue_path='registers' with decomposition='split_k'"))
        # split_k > k-tiles (an empty K slice) is refused by check_compatible() before this
        ws = 4 * spec.split_k * problem.m * problem.n
        if ws > MAX_WORKSPACE_BYTES:
            bad.append(Violation("split_k", spec.split_k,
                                 f"the fp32 workspace (split_k, M, N) would take {ws / 2**20:.0f} MiB, over "
                                 f"{MAX_WORKSPACE_BYTES >> 20} MiB",
                                 "use a smaller split_k (split-K pays off for small M*N and deep K)"))
    if spec.decomposition == "stream_k":
        why = None
        if pingpong:
            why = ("stream-K runs one tile at a time on both consumer warpgroups", "use warp_specialization='cooperative'")
        elif spec.shape_specialization == "dynamic":
            why = ("stream-K plans its work split for one shape at compile time",
                   "use shape_specialization='static' with stream-K, or decomposition='data_parallel'")
        if why:
            bad.append(Violation("decomposition", "stream_k", *why))
        iters = -(-problem.m // spec.block_m) * -(-problem.n // spec.block_n) * -(-problem.k // spec.block_k)
        if iters * arch_limits(spec.arch).sm_count >= 2**31:
            bad.append(Violation("decomposition", "stream_k",
                                 f"{iters} k-iterations times {arch_limits(spec.arch).sm_count} CTAs overflow the "
                                 "kernel's 32-bit work split", "use data_parallel for problems this large"))
    return bad
