"""Per-architecture hardware limits: the one table every validator and heuristic reads.

Values are the documented per-device limits of the reference part of each architecture
(A100-SXM for sm_80, H100-SXM for sm_90/sm_90a). Where a live GPU is present, callers that
need the exact SM count or L2 size read it off the device; this table is what validation
and CPU-only planning use.

Device memory is the exception: it is that of the *largest* part of each architecture (the
A100 80GB for sm_80; the GH200 with 144 GB of HBM3e for sm_90/sm_90a, larger than the H200's
141 GB and the H100's 80 GB). The size checks use it only where no GPU is visible, as an upper
bound: a problem is refused there only if no part of the target arch could hold it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ArchLimits:
    name: str
    smem_per_block: int  # bytes of shared memory a block may opt in to
    smem_per_sm: int
    regs_per_thread: int
    regs_per_sm: int
    max_threads_per_block: int
    sm_count: int
    l2_bytes: int
    max_cluster_size: int  # portable cluster size; 1 means no clusters
    has_tma: bool
    has_wgmma: bool
    largest_part: str = ""  # the part of this arch with the most device memory
    largest_part_memory: int = 0  # its device memory, bytes
    # Peak rates of the reference part (A100-SXM, H100-SXM): the scale of speed estimates that rank
    # candidates or feed a cost model, never a limit (the speed-of-light check has its own bounds).
    peak_tflops: float = 0.0  # dense fp16 tensor-core TFLOP/s
    dram_tbps: float = 0.0  # DRAM TB/s
    l2_tbps: float = 0.0  # L2 -> SM TB/s

    @property
    def smem_per_block_kib(self) -> float:
        return self.smem_per_block / 1024


ARCHS: dict[str, ArchLimits] = {
    "sm_80": ArchLimits(
        name="sm_80",
        smem_per_block=163 * 1024,
        smem_per_sm=164 * 1024,
        regs_per_thread=255,
        regs_per_sm=65536,
        max_threads_per_block=1024,
        sm_count=108,
        l2_bytes=40 * 1024 * 1024,
        max_cluster_size=1,
        has_tma=False,
        has_wgmma=False,
        largest_part="A100 80GB",
        largest_part_memory=80 * 2**30,
        peak_tflops=312.0,
        dram_tbps=2.0,
        l2_tbps=7.0,
    ),
    "sm_90": ArchLimits(
        name="sm_90",
        smem_per_block=227 * 1024,
        smem_per_sm=228 * 1024,
        regs_per_thread=255,
        regs_per_sm=65536,
        max_threads_per_block=1024,
        sm_count=132,
        l2_bytes=50 * 1024 * 1024,
        max_cluster_size=8,
        has_tma=True,
        has_wgmma=False,  # wgmma and setmaxnreg need the arch-specific sm_90a target
        largest_part="GH200 144GB HBM3e",
        largest_part_memory=144 * 2**30,
        peak_tflops=989.0,
        dram_tbps=3.35,
        l2_tbps=12.0,
    ),
    "sm_90a": ArchLimits(
        name="sm_90a",
        smem_per_block=227 * 1024,
        smem_per_sm=228 * 1024,
        regs_per_thread=255,
        regs_per_sm=65536,
        max_threads_per_block=1024,
        sm_count=132,
        l2_bytes=50 * 1024 * 1024,
        max_cluster_size=8,
        has_tma=True,
        has_wgmma=True,
        largest_part="GH200 144GB HBM3e",
        largest_part_memory=144 * 2**30,
        peak_tflops=989.0,
        dram_tbps=3.35,
        l2_tbps=12.0,
    ),
}

# Bytes per element of each dtype the IR knows.
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4}


def arch_limits(arch: str) -> ArchLimits:
    try:
        return ARCHS[arch]
    except KeyError:
        raise KeyError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}") from None


def arch_from_capability(major: int, minor: int) -> str:
    """Map a CUDA compute capability to the IR's arch name (sm_90 -> sm_90a: we own the GPU)."""
    if (major, minor) >= (9, 0):
        return "sm_90a"
    if (major, minor) >= (8, 0):
        return "sm_80"
    raise ValueError(f"compute capability {major}.{minor} is older than sm_80, which cudal2 needs")
