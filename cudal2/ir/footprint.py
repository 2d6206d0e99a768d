"""Device memory a GEMM needs: its operands, its output and, for split-K and stream-K, its workspace.

One arithmetic behind every size check:
- GemmProblem refuses a problem that no GPU of any arch in the hardware table could hold;
- the search refuses a problem that does not fit the target GPU's free memory (with no GPU, the
  memory of the target arch's largest part) before anything compiles;
- the evaluator refuses a spec whose workspace does not fit beside the problem.

Sizes count what a caller holds: A, B, D, the bias and, where the epilogue reads C (beta != 0),
C apart from D (torch.addmm returns a new D). The evaluator's own buffers (the fp32 reference,
rotated input sets) are not counted here: it sizes them to what is left (cudal2.bench.memory).
"""

from __future__ import annotations

from typing import Any

from .errors import SpecError, Violation
from .hardware import ARCHS, DTYPE_BYTES, arch_limits

FIX_PROBLEM = "search a smaller shape, or split the GEMM into several that fit (by rows of A and D, or along K)"
FIX_WORKSPACE = "use decomposition='data_parallel' (no workspace) or a smaller split_k"


def operand_bytes(problem: Any) -> dict[str, int]:
    """Bytes of each tensor the problem's caller holds: a, b, d, and c and bias where the epilogue
    reads them (0 where it does not)."""
    m, n, k = problem.m, problem.n, problem.k
    ab, cd = DTYPE_BYTES[problem.dtype], DTYPE_BYTES[problem.c_dtype]
    e = problem.epilogue
    return {"a": m * k * ab, "b": k * n * ab, "c": m * n * cd if e.beta != 0 else 0,
            "bias": n * cd if e.bias else 0, "d": m * n * cd}


def problem_bytes(problem: Any) -> int:
    """Bytes of A, B, D (and C and the bias where the epilogue reads them): what torch.matmul needs."""
    return sum(operand_bytes(problem).values())


# A serial split-K workspace starts with this many tile counters whatever the call's shape, then the partial sums.
# Fixed, so that one kernel serving shapes of different tile counts (a shape-generic kernel) finds its counters
# where every earlier call left them at zero: where they followed the tile count, a larger call's counters would lie
# where a smaller call wrote partial sums. 256 KiB; an output of more tiles is refused (serial_split_k_violation).
SERIAL_COUNTERS = 1 << 16


def serial_split_k_elements(m: int, n: int, split_k: int) -> int:
    """fp32 elements of a serial split-K workspace: SERIAL_COUNTERS counters, then one (m, n) partial sum per K
    slice."""
    return SERIAL_COUNTERS + split_k * m * n


def serial_split_k_violation(m: int, n: int, block_m: int, block_n: int) -> Violation | None:
    """Why a serial split-K kernel of block_m x block_n tiles cannot compute an m x n output (more tiles than its
    workspace has counters), or None."""
    tiles = -(-m // block_m) * -(-n // block_n)
    if tiles <= SERIAL_COUNTERS:
        return None
    return Violation("split_k_reduction", "serial", f"an {m}x{n} output has {tiles} tiles of {block_m}x{block_n}, "
                     f"more than the {SERIAL_COUNTERS} counters of a serial split-K workspace",
                     "use split_k_reduction='workspace' or larger tiles")


def workspace_bytes(problem: Any, spec: Any) -> int:
    """Bytes of the fp32 workspace a kernel of this spec allocates beside the problem's tensors:
    split-K keeps one partial (M, N) sum per K slice (or one shared sum with atomics); stream-K one
    partial tile and one flag per SM (the CuTe DSL kernel's slots); data-parallel none."""
    if spec.decomposition == "split_k" and spec.split_k > 1:
        if spec.split_k_reduction == "serial":  # and the tiles' counters before the partials
            return 4 * serial_split_k_elements(problem.m, problem.n, spec.split_k)
        slices = spec.split_k if spec.split_k_reduction == "workspace" else 1
        return 4 * slices * problem.m * problem.n
    if spec.decomposition == "stream_k":
        ctas = arch_limits(spec.arch).sm_count
        return 4 * ctas * (spec.block_m * spec.block_n + 1)
    return 0


def human_bytes(n: float) -> str:
    """1.5 GiB, 53.3 PiB: binary units, one decimal."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def largest_memory(arch: str | None = None) -> tuple[int, str]:
    """(bytes, part name) of the largest part of `arch`, or of any arch in the table when None."""
    if arch is not None:
        try:
            hw = arch_limits(arch)
        except KeyError:
            raise SpecError(Violation("arch", arch, "unknown arch", f"use one of {', '.join(ARCHS)}"),
                            what="target") from None
        return hw.largest_part_memory, hw.largest_part
    best = max(ARCHS.values(), key=lambda hw: hw.largest_part_memory)
    return best.largest_part_memory, best.largest_part


class MemoryFitError(SpecError):
    """A problem (or a spec's workspace beside it) does not fit in the memory available for it.
    .needed and .available are bytes; the message names both."""

    def __init__(self, violation: Violation, needed: int, available: int, what: str = "GemmProblem"):
        super().__init__(violation, what=what)
        self.needed = needed
        self.available = available


def _parts(problem: Any, spec: Any = None) -> str:
    """ "A, B and D", "A, B, D and the split-K workspace"."""
    held = [name.upper() if name != "bias" else "the bias" for name, b in operand_bytes(problem).items() if b]
    if spec is not None:
        held.append({"split_k": "the split-K workspace", "stream_k": "the stream-K workspace"}.get(
            spec.decomposition, "the workspace"))
    return ", ".join(held[:-1]) + " and " + held[-1]


def fit_violation(problem: Any, available: int, where: str, spec: Any = None) -> tuple[Violation, int] | None:
    """(the violation, bytes needed) when the problem (with the spec's workspace, if a spec is
    given) needs more than `available` bytes; None when it fits. `where` says what the available
    figure is, e.g. "free on NVIDIA H100 80GB HBM3"."""
    needed = problem_bytes(problem) + (workspace_bytes(problem, spec) if spec is not None else 0)
    if needed <= available:
        return None
    limit = (f"{_parts(problem, spec)} need {needed} bytes ({human_bytes(needed)}), more than the {available} "
             f"bytes ({human_bytes(available)}) {where}")
    if spec is None:
        return Violation("shape", f"{problem.m}x{problem.n}x{problem.k}", limit, FIX_PROBLEM), needed
    return Violation("split_k" if spec.decomposition == "split_k" else "decomposition",
                     spec.split_k if spec.decomposition == "split_k" else spec.decomposition, limit,
                     FIX_WORKSPACE), needed


def check_fits(problem: Any, available: int, where: str, spec: Any = None) -> None:
    """Raise MemoryFitError, naming the bytes needed and available, unless the problem's tensors
    (and the spec's workspace, if given) fit in `available` bytes."""
    found = fit_violation(problem, available, where, spec)
    if found is not None:
        violation, needed = found
        what = "GemmProblem" if spec is None else f"KernelSpec for {problem.label()}"
        raise MemoryFitError(violation, needed, available, what=what)


def unholdable(problem: Any) -> Violation | None:
    """The violation when no GPU of any arch cudal2 targets has the memory for the problem's tensors."""
    memory, part = largest_memory()
    found = fit_violation(problem, memory, f"of the largest GPU any arch cudal2 targets has ({part})")
    return None if found is None else found[0]
