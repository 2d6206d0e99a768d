"""Speed of light: the fastest time a GEMM can take on a given GPU.

A measured time below this floor is not a fast kernel, it is a broken measurement (work
launched where the timer does not see it, results cached, the output not computed). The
evaluator rejects such a candidate as "incorrect" with the reason "implausibly fast".

The peaks are the vendor's dense (no sparsity) 16-bit tensor-core rate and the HBM bandwidth,
rounded *up*, so that no honest kernel can be below the floor. Unknown GPUs get deliberately
generous peaks: the check then only catches gross cheats, never an honest kernel.
"""

from __future__ import annotations

from ..ir import DTYPE_BYTES, GemmProblem
from ..ir.hardware import PART_PEAKS, UNKNOWN_PART, Peak, part_peak


# The peaks live in the hardware table; these names are this check's.
PEAKS, FALLBACK = PART_PEAKS, UNKNOWN_PART


def peak_for(gpu_name: str) -> Peak:
    return part_peak(gpu_name)


def min_bytes(problem: GemmProblem) -> int:
    """Compulsory DRAM traffic: read A and B once, write D once (and read C when beta != 0)."""
    m, n, k = problem.shape
    ab = DTYPE_BYTES[problem.dtype]
    cb = DTYPE_BYTES[problem.c_dtype]
    c_reads = m * n * cb if problem.epilogue.beta != 0 else 0
    return (m * k + k * n) * ab + m * n * cb + c_reads


def floor_ms(problem: GemmProblem, gpu_name: str, data_from_dram: bool = True) -> float:
    """Lower bound on the time of one GEMM. data_from_dram: the timing rotated inputs through
    more memory than L2 holds (or flushed L2), so the bytes had to come from DRAM."""
    peak = peak_for(gpu_name)
    t_flops = problem.flops / (peak.tflops_16bit * 1e12)
    t_bytes = min_bytes(problem) / (peak.tb_per_s * 1e12) if data_from_dram else 0.0
    return max(t_flops, t_bytes) * 1e3


def implausibility(problem: GemmProblem, measured_ms: float, gpu_name: str,
                   data_from_dram: bool = True) -> str | None:
    """None if the time is physically possible, else the reason to reject it."""
    floor = floor_ms(problem, gpu_name, data_from_dram)
    if measured_ms < floor:
        peak = peak_for(gpu_name)
        return (f"implausibly fast: {measured_ms * 1e3:.3f} us per GEMM is below the speed-of-light floor "
                f"{floor * 1e3:.3f} us on {gpu_name or 'an unknown GPU'} ({peak.tflops_16bit:g} TFLOP/s, "
                f"{peak.tb_per_s:g} TB/s); the work ran where the timer could not see it, or was not done")
    return None
