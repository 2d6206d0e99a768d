"""The evaluator's own device memory: how much is left, and how its buffers are sized to it.

A problem that torch.matmul can run must be searchable, so nothing the evaluator adds may be a
fixed multiple of the output: the fp32 reference (twice a 16-bit output) goes to the host when
the device cannot hold it, and is computed in blocks; contenders share their outputs, and fewer
input sets are rotated, when the device cannot hold one set per contender. Measured on an H100
before this: 50000x50000x64 (a 4.7 GiB output) crashed every candidate, asking for 18.6 GiB for a
float64 copy of the output with 13.0 GiB free, where torch.matmul needs the 4.7 GiB alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ir import DTYPE_BYTES, GemmProblem
from .baselines import WRITE_GIVEN_OUTPUT
from .inputs import guard_elements
from .inputs import rotation_count

# Left free beside the evaluator's buffers: cuBLAS and CUDA-graph pools, kernels' scratch, the
# allocator's rounding. Generous on purpose: an out-of-memory error costs a candidate.
RESERVE_MIN = 1 << 30
RESERVE_FRACTION = 0.04
# Rotated input sets take at most this much (enough to exceed twice any L2 of this generation).
ROTATION_BUDGET = 2 << 30


def reserve_bytes(total: int) -> int:
    return max(RESERVE_MIN, int(RESERVE_FRACTION * total))


def device_memory(device: Any) -> tuple[int, int] | None:
    """(free, total) bytes of a CUDA device as this process can use them (what torch's caching
    allocator holds unused counts as free); None for the CPU."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    # (the nested dict as the allocator gives it: memory_reserved and memory_allocated each flatten
    # all of it in Python first, 0.6 ms a call, and the checks ask before every input set)
    stats = torch.cuda.memory_stats_as_nested_dict(device)
    held = lambda name: stats.get(name, {}).get("all", {}).get("current", 0)  # noqa: E731
    return free + max(0, held("reserved_bytes") - held("allocated_bytes")), total


def spare_bytes(device: Any, reserved: int = 0) -> int | None:
    """Bytes the evaluator may still allocate on device (free, less the reserve and `reserved`);
    None (no limit) on the CPU."""
    mem = device_memory(device)
    if mem is None:
        return None
    free, total = mem
    return max(0, free - reserve_bytes(total) - reserved)


def input_set_bytes(problem: GemmProblem) -> int:
    """One input set of the evaluator: A, B, and the bias and C where the epilogue reads them."""
    m, n, k = problem.shape
    ab, cd = DTYPE_BYTES[problem.dtype], DTYPE_BYTES[problem.c_dtype]
    e = problem.epilogue
    return (m * k + k * n) * ab + (n * cd if e.bias else 0) + (m * n * cd if e.beta != 0 else 0)


def output_bytes(problem: GemmProblem) -> int:
    """One guarded output buffer (cudal2.bench.inputs.GuardedOutput)."""
    return (problem.m * problem.n + 2 * guard_elements(problem)) * DTYPE_BYTES[problem.c_dtype]


def reference_bytes(problem: GemmProblem) -> int:
    return 4 * problem.m * problem.n


def block_plan(m: int, n: int, k: int, budget_elements: int | None) -> tuple[int, int, int]:
    """(rows, cols, depth) of the blocks of an fp32 product of an (m, k) and a (k, n) operand such
    that the fp32 copies of an A block (rows x depth) and a B block (depth x cols) and five
    rows x cols blocks (the product, the running sum, the epilogue's temporaries) stay within
    budget_elements fp32 elements. Columns shrink first, so that dot products keep their whole
    K (and the same summation as one product) wherever one column block of full depth fits; a
    None budget is one block."""
    if budget_elements is None:
        return m, n, k
    budget = max(1, budget_elements)

    def cost(rows: int, cols: int, depth: int) -> int:
        return rows * depth + depth * cols + 5 * rows * cols

    cols, depth = n, k
    while cols > 1 and cost(1, cols, depth) > budget:
        cols = -(-cols // 2)
    while depth > 1 and cost(1, cols, depth) > budget:
        depth = -(-depth // 2)
    rows = (budget - depth * cols) // (depth + 5 * cols)
    return max(1, min(m, rows)), cols, depth


def row_block(rows: int, row_elements: int, max_elements: int) -> int:
    """Rows per block so that a block holds at most max_elements (at least one row)."""
    return max(1, min(rows, max_elements // max(1, row_elements)))


@dataclass(frozen=True)
class TimingPlan:
    """How the timing job lays out its buffers (see plan_timing)."""

    n_sets: int  # input sets rotated through
    shared_outputs: bool  # one output buffer per set for all candidates and the torch baseline
    dropped: tuple[str, ...] = ()  # baselines left out: their own outputs do not fit
    note: str = ""  # why the plan departs from one output per contender and set, if it does


def plan_timing(problem: GemmProblem, l2_bytes: int, spare: int | None, n_candidates: int,
                baselines: tuple[str, ...], workspaces: int = 0) -> TimingPlan:
    """The timing job's layout within `spare` bytes (None: the CPU, no limit).

    Normally each candidate and the torch baseline write their own output for each input set, and
    cuBLASLt (through nvmath, which allocates its results) holds one result per set. Where the
    device cannot hold that for even one set, the candidates and torch share one output per set
    (they run one after another, and each is checked right after its own timed run), and where
    that is still too much the cuBLASLt baselines are left out. Room is kept for the candidates'
    workspaces and for the blocks of the fp32 reference (which goes to the host when it does not
    fit). Fewer sets are rotated (down to one) where two would take more than half the room: a set
    that large is far larger than L2 anyway."""
    if spare is None:
        return TimingPlan(2, False)
    out, ins = output_bytes(problem), input_set_bytes(problem)
    own = n_candidates + sum(1 for b in baselines if b in WRITE_GIVEN_OUTPUT)
    lt = [b for b in baselines if b.startswith("cublaslt")]
    scratch = min(reference_bytes(problem), RESERVE_MIN)  # blocks of the reference and error sums
    room = max(0, spare - workspaces - scratch)
    layouts = [(ins + out * (own + len(lt)), False, ()),
               (ins + out * (1 + len(lt)), True, ()),
               (ins + out, True, tuple(lt))]
    set_cost, shared, dropped = next(((c, s, d) for c, s, d in layouts if c <= room), layouts[-1])
    # Sets beyond the first take at most half the room: the rest holds the references (one per
    # set, on the device where they fit) and whatever cuBLAS and the graphs allocate. Below that
    # the count is what it always was (at least two sets, ROTATION_BUDGET).
    n = rotation_count(problem, l2_bytes, memory_budget=min(ROTATION_BUDGET, room), set_cost=set_cost,
                       free_bytes=room // 2)
    note = ""
    if shared:
        note = (f"outputs shared by the contenders: one each ({out * own} bytes a set) does not fit in "
                f"{room} bytes")
        if dropped:
            note += f"; {', '.join(dropped)} left out (their own outputs do not fit either)"
    return TimingPlan(n, shared, dropped, note)


@dataclass(frozen=True)
class DeviceMemory:
    """What the evaluator's worker reports of its GPU (bytes)."""

    free: int
    total: int
    name: str
