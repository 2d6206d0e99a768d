"""KernelSpec: how a GEMM is computed. What a proposer chooses, and all it may choose.

A spec is validated alone on construction (hardware limits of its arch, internal
consistency, the declared capabilities of its backend); `check_compatible(problem, spec)`
adds the checks that need the problem too (alignment for TMA, split-K depth, dtypes).
Operands are 16-bit (fp16/bf16), so shared-memory sizes count 2 bytes per element.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Mapping, Sequence

from pydantic import Field, model_validator

from . import capabilities
from .errors import SpecError, Violation
from .footprint import serial_split_k_violation
from .hardware import ARCHS, DEFAULT_ARCH, DTYPE_BYTES, TILE_WIDTHS, ArchLimits, arch_limits
from .model import IRModel
from .problem import GemmProblem

OPERAND_BYTES = 2
# Registers per thread kept free for addresses, loop state and epilogue temporaries.
REGISTER_RESERVE = 40
PRODUCER_WARPS = 4  # one warpgroup loads for warp-specialized kernels

Arch = Literal[tuple(ARCHS)]  # the targets hardware.ARCHS has a record of
# Every width the hardware's MMA takes (hardware.TILE_WIDTHS): widths that are not powers of two cut
# a dimension into tiles that fill the SMs where 128 leaves them idle (cuBLAS runs 192 on H100 for
# 256x12288x12288, 12288x256x16384 and 12288x128x12288; quack's autotuner 160 and 208). Backends
# declare the subset their kernels serve (Triton: powers of two).
Block = Literal[TILE_WIDTHS]


class KernelSpec(IRModel):
    # --- target ----------------------------------------------------------------------------
    backend: str = Field("triton", description="codegen backend that renders this spec")
    arch: Arch = Field(DEFAULT_ARCH, description="target architecture")
    # --- tile --------------------------------------------------------------------------------
    block_m: Block = Field(128, description="rows of D computed by one block (CTA)")
    block_n: Block = Field(128, description="columns of D computed by one block")
    block_k: Literal[16, 32, 64, 128, 256] = Field(64, description="K extent of one main-loop step")
    num_warps: Literal[1, 2, 4, 8, 12, 16] = Field(
        4, description="warps per block; with warp specialization this includes the producer warpgroup")
    mma: Literal["auto", "mma_sync", "wgmma"] = Field(
        "auto", description="tensor-core instruction: auto lets the backend pick the best for arch")
    # --- clusters (Hopper) -----------------------------------------------------------------------
    cluster_m: Literal[1, 2, 4] = Field(1, description="blocks per cluster along M (TMA multicast of B)")
    cluster_n: Literal[1, 2, 4] = Field(1, description="blocks per cluster along N (TMA multicast of A)")
    # --- pipeline --------------------------------------------------------------------------------
    # up to 16: small tiles on deep K want deep pipelines (cuBLAS runs 64x32 tiles with 16 stages)
    stages: int = Field(3, ge=1, le=16, description="shared-memory pipeline depth")
    load_path: Literal["pointer", "cp_async", "tma"] = Field(
        "pointer", description="how tiles move from global to shared memory")
    warp_specialization: Literal["none", "cooperative", "pingpong"] = Field(
        "none", description="producer/consumer warp roles")
    producer_registers: int | None = Field(None, description="setmaxnreg for the producer warpgroup")
    consumer_registers: int | None = Field(None, description="setmaxnreg for consumer warpgroups")
    # --- swizzle and rasterization -----------------------------------------------------------------
    smem_swizzle: Literal["auto", "none", "32B", "64B", "128B"] = Field(
        "auto", description="shared-memory swizzle; auto lets the backend choose")
    raster_group: int = Field(8, ge=1, le=64, description="tiles per group in grouped rasterization (1 = none)")
    raster_order: Literal["along_m", "along_n"] = Field("along_m", description="direction groups advance")
    # --- padding -----------------------------------------------------------------------------------
    smem_padding: Literal[0, 8, 16] = Field(0, description="elements added to each shared-memory row (no swizzle)")
    # --- work decomposition --------------------------------------------------------------------------
    decomposition: Literal["data_parallel", "split_k", "stream_k"] = Field(
        "data_parallel", description="how output tiles and K are shared out among blocks")
    split_k: int = Field(1, ge=1, le=64, description="K slices when decomposition is split_k")
    split_k_reduction: Literal["atomic", "workspace", "serial"] = Field(
        "workspace", description="how split-K partial sums are combined: workspace (fp32 partials, summed by a "
        "second kernel), serial (fp32 partials, summed in slice order by the slice that finishes its tile last: "
        "one launch) or atomic (fp32 atomics into one sum)")
    persistent: bool = Field(False, description="one block per SM looping over tiles")
    # --- epilogue ------------------------------------------------------------------------------------
    epilogue_path: Literal["registers", "smem", "tma_store"] = Field(
        "registers", description="how the output tile reaches global memory")
    epilogue_subtile: Literal[1, 2, 4] = Field(1, description="output tile stored in this many pieces")
    # --- operand order -------------------------------------------------------------------------------
    # cuBLAS's natural orientation for a row-major D: the kernel computes D^T = B^T A^T, so the
    # tensor-core instruction's M (64 rows per warpgroup on Hopper) runs along D's columns and its N
    # (any multiple of 8) along D's rows. Tall, narrow outputs (12288x128, 12288x256) then take
    # tiles of 96 or 192 rows, and a 192x128 tile is two warpgroups of 128x192 instead of three of
    # 64x128. Every other field keeps its meaning in D's terms (block_m is still rows of D,
    # cluster_n still multicasts A); the backend transposes them for the kernel.
    swap_ab: bool = Field(False, description="compute D^T = B^T @ A^T (tile fields still name D's rows/columns)")
    # --- shapes --------------------------------------------------------------------------------------
    # A dynamic kernel takes M, N and K at run time: compiled once, it serves every shape of its
    # dtype, layout and epilogue (what a sweep over many shapes and an op serving unseen shapes
    # want). A static one bakes the shape in. auto: the backend's choice, which is static for
    # both backends (on the 48 probe shapes on an H100, the dynamic kernels measured 0.7% slower
    # with Triton, 1.3% with the CuTe DSL, up to 6% on a few). A search measures the dynamic
    # kernels and times its leader's static twin in its confirmation rounds (search/confirm.py).
    shape_specialization: Literal["auto", "dynamic", "static"] = Field(
        "auto", description="dynamic: one kernel for every M, N, K; static: compiled for one shape")

    _LATER_FIELDS: ClassVar[tuple[str, ...]] = ("swap_ab", "shape_specialization")

    # ---- derived ------------------------------------------------------------------------------------
    @property
    def consumer_warps(self) -> int:
        return self.num_warps - PRODUCER_WARPS if self.warp_specialization != "none" else self.num_warps

    def smem_bytes(self) -> int:
        """Shared memory for the main-loop stages plus a staged epilogue tile (or what the backend
        declares its epilogue stages, when it stages less than the whole tile)."""
        fields = dict(self)
        return self.stages * stage_bytes(fields) + epilogue_smem_bytes(fields)

    def summary(self) -> str:
        """One line for tables: tile, warps, stages, load path, then what departs from a plain
        data-parallel kernel (warp specialization, cluster, split-K or stream-K, persistence)."""
        s = f"{self.block_m}x{self.block_n}x{self.block_k} w{self.num_warps} s{self.stages} {self.load_path}"
        if self.warp_specialization != "none":
            s += f" {self.warp_specialization}"
        if self.cluster_m * self.cluster_n > 1:
            s += f" cluster{self.cluster_m}x{self.cluster_n}"
        if self.decomposition == "split_k":
            s += f" splitk{self.split_k}/{self.split_k_reduction}"
        elif self.decomposition == "stream_k":
            s += " streamk"
        if self.swap_ab:
            s += " swapAB"
        return s + (" persistent" if self.persistent else "")

    def accumulator_registers(self) -> int:
        """fp32 accumulator registers each consumer thread holds."""
        return self.block_m * self.block_n // (self.consumer_warps * 32)

    # ---- validation -----------------------------------------------------------------------------------
    @model_validator(mode="after")
    def _check(self) -> "KernelSpec":
        bad = _spec_violations(self)
        if bad:
            raise SpecError(bad, what="KernelSpec")
        return self


def summaries_told_apart(specs: Sequence[KernelSpec]) -> list[str]:
    """Each spec's summary(); where several specs share one, each of them followed by the fields
    whose values differ among them ("raster_group=8"), so that no two different specs of a table
    read the same."""
    lines = [s.summary() for s in specs]
    groups: dict[str, list[int]] = {}
    for i, line in enumerate(lines):
        groups.setdefault(line, []).append(i)
    for members in groups.values():
        fields = [spec.to_dict() for spec in (specs[i] for i in members)]
        differ = [k for k in fields[0] if len({repr(f.get(k)) for f in fields}) > 1]
        for i, f in zip(members, fields):
            if differ:
                lines[i] += " " + " ".join(f"{k}={f.get(k)}" for k in differ)
    return lines


def stage_bytes(fields: Mapping[str, Any]) -> int:
    """Shared memory of one main-loop stage of a spec (given as its fields): an A and a B tile of
    block_k (+ padding) columns."""
    return (fields["block_m"] + fields["block_n"]) * (fields["block_k"] + fields["smem_padding"]) * OPERAND_BYTES


def epilogue_smem_bytes(fields: Mapping[str, Any]) -> int:
    """Shared memory the epilogue of a spec (given as its fields) stages: what its backend declares
    (Capabilities.epilogue_smem), else the output tile over epilogue_subtile pieces; none for the
    registers path."""
    if fields["epilogue_path"] == "registers":
        return 0
    caps = capabilities.resolve(fields["backend"])
    if caps is not None and caps.epilogue_smem is not None:
        return caps.epilogue_smem(fields)
    return fields["block_m"] * fields["block_n"] * OPERAND_BYTES // fields["epilogue_subtile"]


def _spec_violations(s: KernelSpec) -> list[Violation]:
    hw = arch_limits(s.arch)
    return [*_decomposition_violations(s, hw), *_arch_feature_violations(s, hw), *_warp_role_violations(s, hw),
            *_resource_violations(s, hw), *_capability_violations(s)]  # the last: the backend's own declaration


def _decomposition_violations(s: KernelSpec, hw: ArchLimits) -> list[Violation]:
    """split_k and the decomposition agree."""
    bad: list[Violation] = []
    add = lambda f, v, lim, fix: bad.append(Violation(f, v, lim, fix))  # noqa: E731
    if s.decomposition == "split_k" and s.split_k < 2:
        add("split_k", s.split_k, "decomposition='split_k' needs split_k >= 2",
            "set split_k to 2..64 or decomposition='data_parallel'")
    if s.decomposition != "split_k" and s.split_k != 1:
        add("split_k", s.split_k, f"split_k > 1 needs decomposition='split_k' (got {s.decomposition!r})",
            "set decomposition='split_k' or split_k=1")
    return bad


def _arch_feature_violations(s: KernelSpec, hw: ArchLimits) -> list[Violation]:
    """TMA, wgmma and clusters exist on the arch."""
    bad: list[Violation] = []
    add = lambda f, v, lim, fix: bad.append(Violation(f, v, lim, fix))  # noqa: E731
    if s.load_path == "tma" and not hw.has_tma:
        add("load_path", "tma", f"TMA does not exist on {s.arch}", "use 'cp_async' or 'pointer', or arch sm_90a")
    if s.epilogue_path == "tma_store" and not hw.has_tma:
        add("epilogue_path", "tma_store", f"TMA does not exist on {s.arch}", "use 'smem' or 'registers'")
    if s.mma == "wgmma" and not hw.has_wgmma:
        add("mma", "wgmma", f"wgmma needs sm_90a (arch is {s.arch})", "use mma='mma_sync' or arch='sm_90a'")
    cluster = s.cluster_m * s.cluster_n
    if cluster > hw.max_cluster_size:
        add("cluster_m*cluster_n", cluster,
            f"{s.arch} allows clusters of at most {hw.max_cluster_size} block(s)",
            "use cluster_m=cluster_n=1" if hw.max_cluster_size == 1 else "use a smaller cluster")
    return bad


def _warp_role_violations(s: KernelSpec, hw: ArchLimits) -> list[Violation]:
    """A producer warpgroup, whole consumer warpgroups, and a register split that fits."""
    bad: list[Violation] = []
    add = lambda f, v, lim, fix: bad.append(Violation(f, v, lim, fix))  # noqa: E731
    if s.warp_specialization != "none":
        if s.load_path != "tma":
            add("warp_specialization", s.warp_specialization, "a producer warpgroup needs load_path='tma'",
                "set load_path='tma' or warp_specialization='none'")
        need = PRODUCER_WARPS + (8 if s.warp_specialization == "pingpong" else 4)
        if s.num_warps < need:
            add("num_warps", s.num_warps,
                f"{s.warp_specialization} needs >= {need} warps (1 producer + consumer warpgroups)",
                f"set num_warps={need if s.warp_specialization == 'pingpong' else 12}")
        if s.num_warps % 4:
            add("num_warps", s.num_warps, "warp-specialized kernels use whole warpgroups (multiples of 4)",
                "use 8, 12 or 16")
    for name in ("producer_registers", "consumer_registers"):
        v = getattr(s, name)
        if v is None:
            continue
        if s.warp_specialization == "none":
            add(name, v, "a register split needs warp_specialization", "leave it None")
        elif not (24 <= v <= 256 and v % 8 == 0):
            add(name, v, "setmaxnreg takes a multiple of 8 in [24, 256]", "round to a multiple of 8")
    if s.producer_registers and s.consumer_registers and s.warp_specialization != "none":
        total = 128 * s.producer_registers + 32 * s.consumer_warps * s.consumer_registers
        if total > hw.regs_per_sm:
            add("consumer_registers", s.consumer_registers,
                f"register split uses {total} registers, more than {hw.regs_per_sm} per SM",
                "lower consumer_registers (e.g. 232 with 2 consumer warpgroups, producer 40)")
    return bad


def _resource_violations(s: KernelSpec, hw: ArchLimits) -> list[Violation]:
    """Padding or swizzle; threads, accumulator registers and shared memory within the arch's limits."""
    bad: list[Violation] = []
    add = lambda f, v, lim, fix: bad.append(Violation(f, v, lim, fix))  # noqa: E731
    if s.smem_padding and s.smem_swizzle not in ("auto", "none"):
        add("smem_padding", s.smem_padding, f"padding and a {s.smem_swizzle} swizzle exclude each other",
            "set smem_padding=0 or smem_swizzle='none'")

    # threads, registers, shared memory
    threads = s.num_warps * 32
    if threads > hw.max_threads_per_block:
        add("num_warps", s.num_warps, f"{threads} threads exceed {hw.max_threads_per_block} per block",
            "use fewer warps")
    if s.consumer_warps > 0:
        acc = s.accumulator_registers()
        budget = hw.regs_per_thread - REGISTER_RESERVE
        if acc > budget:
            add("block_m*block_n", s.block_m * s.block_n,
                f"{acc} fp32 accumulator registers per thread with {s.consumer_warps} computing warps "
                f"exceed the {budget} left of {hw.regs_per_thread} on {s.arch}",
                "use more warps or a smaller tile")
    smem = s.smem_bytes()
    if smem > hw.smem_per_block:
        add("stages", s.stages,
            f"(block_m + block_n) * (block_k + padding) * stages * {OPERAND_BYTES} bytes"
            + (" + epilogue buffers" if s.epilogue_path != "registers" else "")
            + f" = {smem / 1024:.1f} KiB exceeds {hw.smem_per_block_kib:.0f} KiB of shared memory on {s.arch}",
            f"use at most {_max_stages(s, hw.smem_per_block)} stages or a smaller tile")
    return bad


def _max_stages(s: KernelSpec, limit: int) -> int:
    fields = dict(s)
    per_stage = stage_bytes(fields)
    return max(0, (limit - epilogue_smem_bytes(fields)) // per_stage)


def _capability_violations(s: KernelSpec) -> list[Violation]:
    if not capabilities.resolver_installed():
        return []
    caps = capabilities.resolve(s.backend)
    if caps is None:
        known = ", ".join(capabilities.known_backends()) or "none installed"
        return [Violation("backend", s.backend, f"unknown backend (known: {known})",
                          "use one of the known backends or install the package that provides it")]
    bad = []
    for name, value in s.to_dict().items():
        allowed = caps.allowed(name, s.arch)
        if allowed is not None and value not in allowed:
            bad.append(Violation(name, value, f"backend {s.backend!r} on {s.arch} supports "
                                 f"{sorted(allowed, key=str)}", "pick one of those values or another backend"))
    return bad


def check_compatible(problem: GemmProblem, spec: KernelSpec) -> None:
    """Raise SpecError if this spec cannot run this problem."""
    bad: list[Violation] = []
    lead = problem.leading_dims()
    if spec.load_path == "tma":
        for op in ("a", "b"):
            if (lead[op] * DTYPE_BYTES[problem.dtype]) % 16:
                dim = {"a": "K" if problem.a_row_major else "M",
                       "b": "N" if problem.b_row_major else "K"}[op]
                bad.append(Violation(f"problem.{dim.lower()}", lead[op],
                                     f"TMA needs 16-byte aligned strides: operand {op.upper()} with layout "
                                     f"{problem.layout} has leading dimension {dim}={lead[op]}, not a multiple of 8",
                                     "use load_path='pointer' or 'cp_async', or pad the operand"))
    if spec.epilogue_path == "tma_store" and (lead["c"] * DTYPE_BYTES[problem.c_dtype]) % 16:
        bad.append(Violation("problem.n", problem.n, "TMA store needs N a multiple of 8",
                             "use epilogue_path='smem' or 'registers'"))
    if spec.decomposition == "split_k":
        k_blocks = -(-problem.k // spec.block_k)
        if spec.split_k > k_blocks:
            bad.append(Violation("split_k", spec.split_k,
                                 f"K={problem.k} has only {k_blocks} block(s) of block_k={spec.block_k}",
                                 f"use split_k <= {k_blocks} or a smaller block_k"))
        if spec.split_k_reduction == "serial":
            too_many = serial_split_k_violation(problem.m, problem.n, spec.block_m, spec.block_n)
            if too_many is not None:
                bad.append(too_many)
    if capabilities.resolver_installed():
        caps = capabilities.resolve(spec.backend)
        if caps is not None:
            for name in ("dtype", "layout", "accumulator"):
                allowed = caps.allowed(f"problem.{name}", spec.arch)
                value = getattr(problem, name)
                if allowed is not None and value not in allowed:
                    bad.append(Violation(f"problem.{name}", value,
                                         f"backend {spec.backend!r} supports {sorted(allowed)}",
                                         "choose another backend for this problem"))
    if bad:
        raise SpecError(bad, what=f"problem {problem.label()} with this KernelSpec")
