"""CUDA C++ backend (CuTe/CUTLASS C++ headers and inline PTX) for the A100 family, sm_80.

One kernel family, `gemm_sm80` (templates/cuda_cpp/): a multistage cp.async pipeline of `stages`
shared-memory buffers (swizzled or padded rows), ldmatrix (.trans for an M- or N-major operand)
into register fragments double-buffered across the k-blocks of a tile, mma.sync m16n8k16 with
fp32 accumulators, grouped rasterization, split-K through an fp32 workspace and a reduction
kernel, and the IR's epilogue (alpha, beta * C, bias, relu/gelu/silu) stored from registers or
through shared memory with vector stores. Every edge is predicated: the kernel takes M, N, K and
the leading dimensions at run time, so one compile serves every shape of a problem class
(dtypes, layout, epilogue) that selects the same *variant*: the widest vector (8, 4, 2 or 1
elements) that divides the contiguous extent of A, of B and of the output row.

The spec's arch names the code family, not the binary: sm_80 code is compiled for the GPU that
runs it (an H100 runs it as sm_90 SASS), or for sm_80 where no GPU is visible (the CPU tests).
The toolchain (nvcc, the cubin cache, loading through the CUDA driver) is cuda_cpp_toolchain.py.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Mapping

from cudal2.settings import settings
from ..ir import Capabilities, GemmProblem, KernelSpec, Violation, options
from ..ir.spec import stage_bytes
from . import cuda_cpp_toolchain as toolchain
from .base import Backend, Source, Support
from .operands import call_extents, device_errors, operand_errors, torch_dtype
from .workspace import Workspace
from .. import paths

SWIZZLE_BITS = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
ELEMENT = {"float16": "cute::half_t", "bfloat16": "cute::bfloat16_t"}
MMA_OP = {"float16": "SM80_16x8x16_F32F16F16F32_TN", "bfloat16": "SM80_16x8x16_F32BF16BF16F32_TN"}
EPILOGUE_PAD_FLOATS = 4  # per staged row (templates/cuda_cpp/_epilogue_smem.cuh.j2)
# Registers per thread beyond accumulators and fragments: addresses, predicates, loop state. The
# 128x128x32 4-warp kernel holds 192 in accumulators and fragments and ptxas gave it 240 (smaller
# tiles get more than this estimate, but far from 255; docs/cuda_cpp_backend.md has the table).
REGISTER_OVERHEAD = 48
MAX_REGISTERS = 255
KERNEL = "cudal2_gemm"
REDUCE = "cudal2_splitk_reduce"
REDUCE_THREADS = 256


def epilogue_staging_bytes(f: Mapping[str, Any]) -> int:
    """Shared memory the smem epilogue stages at once: a fp32 slice of the tile, padded rows."""
    if f["epilogue_path"] != "smem":
        return 0
    return f["block_m"] * (f["block_n"] // f["epilogue_subtile"] + EPILOGUE_PAD_FLOATS) * 4


def epilogue_smem_bytes(f: Mapping[str, Any]) -> int:
    """What the epilogue adds to the IR's count of the mainloop's stages: the staged slice reuses
    the pipeline's buffers, so only what it needs beyond them."""
    return max(0, epilogue_staging_bytes(f) - f["stages"] * stage_bytes(f))


CAPABILITIES = Capabilities(
    options=options(
        arch=["sm_80"],
        block_m=[32, 64, 128, 256], block_n=[32, 64, 128, 256], block_k=[16, 32, 64, 128],
        num_warps=[1, 2, 4, 8],
        mma=["auto", "mma_sync"],
        cluster_m=[1], cluster_n=[1],
        stages=list(range(2, 9)),  # the cp.async pipeline overlaps nothing with one stage
        load_path=["cp_async"],
        warp_specialization=["none"], producer_registers=[None], consumer_registers=[None],
        smem_swizzle=["auto", "none", "32B", "64B", "128B"], smem_padding=[0, 8, 16],
        raster_order=["along_m", "along_n"],
        decomposition=["data_parallel", "split_k"],
        split_k_reduction=["workspace"],  # a fixed summation order: deterministic results
        persistent=[False],
        epilogue_path=["registers", "smem"], epilogue_subtile=[1, 2, 4],
        swap_ab=[False],
        shape_specialization=["auto", "dynamic"],  # always shape-generic (auto = dynamic)
        **{"problem.accumulator": ["float32"], "problem.dtype": ["float16", "bfloat16"],
           "problem.layout": ["NN", "NT", "TN", "TT"]},
    ),
    epilogue_smem=epilogue_smem_bytes,
)


# ---- policy: the decisions the IR leaves to the backend -----------------------------------------
def warp_layout(block_m: int, block_n: int, num_warps: int) -> tuple[int, int] | None:
    """(warps along M, warps along N): each warp takes 16x16 pieces of the tile, so the tile must
    split into them; of the splits that fit, the one whose warp tile has the least perimeter (the
    least shared memory read per mma), taller first on a tie. None when no split fits."""
    fits = [(wm, num_warps // wm) for wm in (1, 2, 4, 8) if num_warps % wm == 0
            and block_m % (16 * wm) == 0 and block_n % (16 * (num_warps // wm)) == 0]
    if not fits:
        return None
    return min(fits, key=lambda w: (block_m // w[0] + block_n // w[1], -w[0]))


def vector_width(extent: int) -> int:
    """Elements per global access along a contiguous extent: the widest of 8, 4, 2, 1 dividing it."""
    return next(v for v in (8, 4, 2, 1) if extent % v == 0)


def variant(problem: GemmProblem) -> tuple[int, int, int]:
    """(A, B, C) vector widths a shape selects: A is contiguous along K (row-major) or M, B along N
    (row-major) or K, C and D along N."""
    a = problem.k if problem.a_row_major else problem.m
    b = problem.n if problem.b_row_major else problem.k
    return vector_width(a), vector_width(b), vector_width(problem.n)


def operand_extents(spec: KernelSpec, problem: GemmProblem) -> dict[str, tuple[int, bool]]:
    """{operand: (its contiguous extent in the tile, whether it is K-major)}."""
    a_k = problem.a_row_major
    b_k = not problem.b_row_major
    return {"a": (spec.block_k if a_k else spec.block_m, a_k), "b": (spec.block_k if b_k else spec.block_n, b_k)}


def swizzle_bits(spec: KernelSpec, contiguous: int) -> int | None:
    """Swizzle of an operand whose tile rows hold `contiguous` elements: 0 (none), 1-3 (32, 64,
    128-byte rows); None when the spec's swizzle does not fit those rows. auto: the widest that
    fits, none with padding (the IR forbids both together)."""
    if spec.smem_padding or spec.smem_swizzle == "none":
        return 0
    if spec.smem_swizzle == "auto":
        return next(b for b in (3, 2, 1, 0) if contiguous % (8 << b) == 0)
    bits = SWIZZLE_BITS[spec.smem_swizzle]
    return bits if contiguous % (8 << bits) == 0 else None


def register_buffers(spec: KernelSpec) -> int:
    """k-blocks of fragments held in registers: two (one loading under one computing) when a tile
    has several k-blocks of 16."""
    return 2 if spec.block_k > 16 else 1


def register_estimate(spec: KernelSpec, warps: tuple[int, int]) -> int:
    """Registers per thread: accumulators, A and B fragments, and REGISTER_OVERHEAD."""
    wm, wn = warps
    acc = spec.block_m * spec.block_n // (32 * spec.num_warps)
    frags = register_buffers(spec) * ((spec.block_m // wm // 16) * 4 + (spec.block_n // wn // 8) * 2)
    return acc + frags + REGISTER_OVERHEAD


def smem_bytes(problem: GemmProblem, spec: KernelSpec) -> int:
    """Dynamic shared memory of a launch: the larger of the pipeline's buffers (A then B, each
    128-byte aligned) and the epilogue's staged slice. The kernel static_asserts it is enough."""
    extents = operand_extents(spec, problem)
    total = 0
    for op, mn in (("a", spec.block_m), ("b", spec.block_n)):
        contiguous, _ = extents[op]
        other = mn * spec.block_k // contiguous
        row = contiguous + spec.smem_padding
        total += -(-(spec.stages * other * row * 2) // 128) * 128
    return max(total, epilogue_staging_bytes(dict(spec)))


def template_violations(problem: GemmProblem, spec: KernelSpec) -> list[Violation]:
    """What the template cannot build beyond the declared option sets (one reason each)."""
    bad: list[Violation] = []
    warps = warp_layout(spec.block_m, spec.block_n, spec.num_warps)
    if warps is None:
        bad.append(Violation("num_warps", spec.num_warps,
                             f"{spec.num_warps} warps cannot split a {spec.block_m}x{spec.block_n} tile into "
                             "16x16 pieces per warp", "use fewer warps or a larger tile"))
    threads = 32 * spec.num_warps
    for op, mn in (("a", spec.block_m), ("b", spec.block_n)):
        if mn * spec.block_k < 8 * threads:
            bad.append(Violation("block_k", spec.block_k,
                                 f"a {mn}x{spec.block_k} tile of {op.upper()} gives fewer than one 16-byte access "
                                 f"to each of {threads} threads", "use a larger block_k or fewer warps"))
    for op, (contiguous, k_major) in operand_extents(spec, problem).items():
        if swizzle_bits(spec, contiguous) is None:
            along = "K" if k_major else ("M" if op == "a" else "N")
            bad.append(Violation("smem_swizzle", spec.smem_swizzle,
                                 f"operand {op.upper()} of layout {problem.layout} has rows of {contiguous} elements "
                                 f"along {along}, fewer than a {spec.smem_swizzle} swizzle row",
                                 "use smem_swizzle='auto' or a narrower swizzle"))
    if warps is not None and (regs := register_estimate(spec, warps)) > MAX_REGISTERS:
        bad.append(Violation("block_m*block_n", spec.block_m * spec.block_n,
                             f"about {regs} registers per thread (accumulators, double-buffered fragments and "
                             f"addresses) exceed {MAX_REGISTERS}: the kernel would spill",
                             "use more warps or a smaller tile"))
    e = problem.epilogue
    for name, value in (("alpha", e.alpha), ("beta", e.beta)):
        if not math.isfinite(value):
            bad.append(Violation(f"problem.epilogue.{name}", value, "must be finite (it is a constant of the kernel)",
                                 "use a finite value"))
    return bad


class CudaCppBackend(Backend):
    name = "cuda_cpp"
    version = "1"
    requirements = ("nvidia-cutlass>=4.2.0.0", "cuda-bindings>=13.4.4")  # as the `cuda` extra (nvcc comes apart)
    language = "cuda"
    capabilities = CAPABILITIES
    templates = {"gemm_sm80": "gemm_sm80.cu.j2"}

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kernels: dict[str, Any] = {}

    def supports(self, problem: GemmProblem, spec: KernelSpec) -> Support:
        base = super().supports(problem, spec)
        if not base:
            return base
        bad = template_violations(problem, spec)
        if bad:
            return Support(False, "; ".join(f"{v.field}={v.value!r}: {v.limit}; fix: {v.fix}" for v in bad))
        return Support(True)

    # ---- one compile per (problem class, variant) --------------------------------------------
    def shape_key(self, problem: GemmProblem, spec: KernelSpec) -> str:
        return problem.class_key()

    def variant_key(self, problem: GemmProblem, spec: KernelSpec) -> str:
        a, b, c = variant(problem)
        return f"a{a}b{b}c{c}"

    def context(self, problem: GemmProblem, spec: KernelSpec) -> dict[str, Any]:
        e = problem.epilogue
        wm, wn = warp_layout(spec.block_m, spec.block_n, spec.num_warps)
        va, vb, vc = variant(problem)
        extents = operand_extents(spec, problem)
        split = spec.split_k if spec.decomposition == "split_k" else 1
        formula = "alpha * A @ B" if e.alpha != 1.0 else "A @ B"
        formula += " + beta * C" if e.beta != 0.0 else ""
        formula += " + bias" if e.bias else ""
        if e.activation != "none":
            formula = f"{e.activation}({formula})"
        return dict(
            backend_version=self.version, problem_class=problem.class_label(), problem_layout=problem.layout,
            spec_summary=spec.summary() + f" swizzle={spec.smem_swizzle} pad={spec.smem_padding} "
                         f"raster={spec.raster_group}/{spec.raster_order} epilogue={spec.epilogue_path}"
                         f"/{spec.epilogue_subtile}",
            variant=self.variant_key(problem, spec), formula=formula,
            element=ELEMENT[problem.dtype], element_c=ELEMENT[problem.c_dtype], mma_op=MMA_OP[problem.dtype],
            warps_m=wm, warps_n=wn, warp_note=f"warp tile {spec.block_m // wm}x{spec.block_n // wn}",
            a_k_major=extents["a"][1], b_k_major=extents["b"][1], align_a=va, align_b=vb, align_c=vc,
            swizzle_a=swizzle_bits(spec, extents["a"][0]), swizzle_b=swizzle_bits(spec, extents["b"][0]),
            register_buffers=register_buffers(spec), split_k=split, along_m=spec.raster_order == "along_m",
            has_alpha=e.alpha != 1.0, has_beta=e.beta != 0.0, bias=e.bias,
            alpha=float(e.alpha).hex(), beta=float(e.beta).hex(), activation_enum="k" + e.activation.capitalize(),
            epilogue_path=spec.epilogue_path, smem_bytes=smem_bytes(problem, spec),
        )

    def render(self, problem: GemmProblem, spec: KernelSpec) -> Source:
        source = super().render(problem, spec)
        meta = {**source.meta, "variant": self.variant_key(problem, spec), "smem_bytes": smem_bytes(problem, spec),
                "functions": [KERNEL] + ([REDUCE] if spec.decomposition == "split_k" else [])}
        return Source(backend=source.backend, problem=problem, spec=spec, text=source.text, language="cuda",
                      entry=KERNEL, meta=meta)

    # ---- compiling -----------------------------------------------------------------------------
    def usable(self) -> tuple[bool, str]:
        try:
            toolchain.find_nvcc()
            toolchain.cutlass_include_dir()
        except toolchain.ToolchainMissing as e:
            return False, str(e)
        return True, ""

    def toolchain_version(self) -> str:
        try:
            nvcc = toolchain.find_nvcc()
            return f"{toolchain.nvcc_version(str(nvcc))},cutlass-{toolchain.headers_version(toolchain.cutlass_include_dir())}"
        except toolchain.ToolchainMissing as e:
            return f"missing ({e})"

    def target(self, spec: KernelSpec) -> str:
        """The SASS target: $CUDAL2_CUDA_ARCH, else the visible GPU's (sm_80 code runs on any later
        GPU when compiled for it), else the spec's arch."""
        return settings().cuda_arch or toolchain.visible_gpu_arch() or spec.arch

    def binary(self, source: Source, target: str | None = None) -> toolchain.Binary:
        """The compiled cubin of a rendered source (cached on disk)."""
        if source.backend != self.name:
            raise ValueError(f"source was rendered by backend {source.backend!r}, not {self.name!r}")
        return toolchain.compile_cuda(source.text, target or self.target(source.spec), paths.cache_dir() / "cuda_cpp")

    def precompile(self, source: Source) -> None:
        self.binary(source)

    def compile(self, source: Source) -> "CudaCppKernel":
        binary = self.binary(source)
        key = f"{binary.target}:{source.digest}"
        with self._lock:
            module = self._kernels.get(key)
            if module is None:
                smem = {KERNEL: source.meta["smem_bytes"], REDUCE: 0}
                module = toolchain.LoadedModule(binary, tuple(source.meta["functions"]), smem)
                self._kernels[key] = module
        return CudaCppKernel(source, module)


class CudaCppKernel:
    """kernel(a, b, c=None, bias=None) -> d, for any M, N, K of the problem's class whose shape
    selects the compiled variant (M, N, K are read off a and b).

    Every tensor is checked (shape, dtype, layout strides, device, the base alignment the variant's
    vector accesses need); d is a new (M, N) tensor when c is None, else c itself (read first when
    beta != 0). The launch goes on torch's current stream: no host synchronization. Split-K kernels
    own an fp32 workspace per device, allocated on first use and grown to the largest M x N served,
    so one kernel object must not run on two streams at once (as with cuBLAS's workspace)."""

    def __init__(self, source: Source, module: toolchain.LoadedModule) -> None:
        self.source = source
        self.problem = source.problem
        self.spec = source.spec
        self.module = module
        self.variant = variant(source.problem)
        self._split = source.spec.split_k if source.spec.decomposition == "split_k" else 1
        self._workspace = Workspace()

    @property
    def resources(self) -> dict[str, toolchain.Resources]:
        """ptxas's registers, spills and stack of each kernel of the binary."""
        return self.module.binary.resources

    def workspace_bytes(self, m: int, n: int) -> int:
        return 0 if self._split == 1 else 4 * self._split * m * _round_up(n, 8)

    def workspace_intact(self) -> bool:
        """Whether the kernel kept inside its own workspace (cudal2.codegen.workspace)."""
        return self._workspace.intact()

    def __call__(self, a, b, c=None, bias=None):
        import torch

        m, n, k = _check_operands(self.problem, self.variant, a, b, c, bias)
        d = c if c is not None else torch.empty((m, n), dtype=torch_dtype(self.problem.c_dtype), device=a.device)
        device = a.device.index if a.device.index is not None else torch.cuda.current_device()
        ws = self._workspace.for_call(a.device, self.workspace_bytes(m, n) // 4)
        if ws is not None:
            self._workspace.follow_device(a.device)
        p = self.problem
        params = toolchain.GemmParams(
            a=a.data_ptr(), b=b.data_ptr(), c=c.data_ptr() if c is not None else 0, d=d.data_ptr(),
            bias=bias.data_ptr() if bias is not None else 0, workspace=ws.data_ptr() if ws is not None else 0,
            lda=k if p.a_row_major else m, ldb=n if p.b_row_major else k, ldw=_round_up(n, 8), m=m, n=n, k=k)
        stream = torch.cuda.current_stream(a.device).cuda_stream
        spec = self.spec
        tiles = -(-m // spec.block_m) * -(-n // spec.block_n)
        with torch.cuda.device(a.device):  # the operands' device's context is the current one
            self.module.launch(device, KERNEL, (tiles, self._split, 1), 32 * spec.num_warps, stream, params)
            if self._split > 1:
                blocks = min(-(-(m * n // self.variant[2]) // REDUCE_THREADS), 1 << 20)
                self.module.launch(device, REDUCE, (blocks, 1, 1), REDUCE_THREADS, stream, params)
        return d


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _check_operands(p: GemmProblem, compiled: tuple[int, int, int], a, b, c, bias) -> tuple[int, int, int]:
    """(M, N, K) of a call, or a ValueError naming every mismatch with the problem class."""
    label = f"cuda_cpp kernel for {p.class_label()}"
    for name, t in (("c", c), ("bias", bias)):
        if t is not None and not (hasattr(t, "shape") and hasattr(t, "stride") and hasattr(t, "data_ptr")):
            raise ValueError(f"{label}: {name} is a {type(t).__name__}, expected a torch.Tensor")
    m, n, k = call_extents(label, a, b)
    errors = operand_errors(p, a, b, c, bias, m, n, k)
    shape = p.replace(m=m, n=n, k=k) if not errors else None
    if shape is not None:
        have = variant(shape)
        if any(h % w for h, w in zip(have, compiled)):
            errors.append(f"this shape's contiguous extents allow vectors of {have} elements (A, B, C) but the "
                          f"kernel was compiled for {compiled}: render the spec for this shape")
        for name, t, width in (("a", a, compiled[0]), ("b", b, compiled[1]), ("c", c, compiled[2]),
                               ("bias", bias, compiled[2])):
            if t is not None and t.data_ptr() % (2 * width):
                errors.append(f"{name} starts at an address not aligned to {2 * width} bytes (the kernel reads it in "
                              f"{width}-element vectors); pass a freshly allocated or .clone()d tensor")
    errors += device_errors([a, b, c, bias])
    if errors:
        raise ValueError(f"{label}: " + "; ".join(errors))
    return m, n, k
