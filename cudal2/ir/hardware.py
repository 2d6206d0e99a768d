"""The hardware facts cudal2 reasons with, in one place: per-architecture limits (ARCHS), the peak
rates of known parts (PART_PEAKS), and the DeviceProfile that puts them together for one GPU.

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

from dataclasses import dataclass, replace


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
    # The compute capabilities whose GPUs this target's code runs on with these limits. A GPU of
    # another capability is refused, never mapped to the nearest target: its limits differ (sm_86's
    # 99 KiB of shared memory a block; sm_100's tensor memory), so validation would pass kernels that
    # do not run there.
    capabilities: tuple[tuple[int, int], ...] = ()
    accumulators: str = "registers"  # where an MMA's accumulators live

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
        capabilities=((8, 0),),
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
        capabilities=((9, 0),),
    ),
}

# The target of planning where no GPU is visible (dry runs, CPU tests, the recorded runner): the H100's.
DEFAULT_ARCH = "sm_90a"

# Widths a block may have along M or N: a WGMMA's N is any multiple of 8 up to 256, and mma.sync's
# tiles are multiples of 8 too. Which of them a backend's kernel can split among its warps, and which
# its loads and epilogue serve, each backend declares from these (its Capabilities).
TILE_WIDTH_STEP = 8
TILE_WIDTH_MAX = 256
TILE_WIDTHS = tuple(range(2 * TILE_WIDTH_STEP, TILE_WIDTH_MAX + 1, TILE_WIDTH_STEP))  # 16, 24, ..., 256

# Bytes per element of each dtype the IR knows.
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4}


def arch_limits(arch: str) -> ArchLimits:
    try:
        return ARCHS[arch]
    except KeyError:
        raise KeyError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}") from None


def arch_from_capability(major: int, minor: int) -> str:
    """The target whose code runs on a GPU of this compute capability (9.0 -> sm_90a: the
    arch-specific target, as cudal2 owns the GPU it tunes). Raises ValueError naming the known
    capabilities for any other: an unknown GPU is refused, never treated as a known one."""
    for name, limits in ARCHS.items():
        if (major, minor) in limits.capabilities:
            return name
    known = ", ".join(f"{a}.{b} ({name})" for name, lim in ARCHS.items() for a, b in lim.capabilities)
    raise ValueError(f"compute capability {major}.{minor} is not a target cudal2 knows ({known}); "
                     "add its limits to cudal2.ir.hardware.ARCHS to tune on it")


@dataclass(frozen=True)
class Peak:
    tflops_16bit: float  # dense fp16/bf16 tensor-core TFLOP/s
    tb_per_s: float  # DRAM bandwidth, TB/s


# The vendor's dense (no sparsity) 16-bit tensor-core rate and HBM bandwidth of known parts,
# rounded *up*: the speed-of-light check (bench/plausibility.py) must never refuse an honest
# kernel. Keyed by a substring of torch.cuda.get_device_name(); the most specific match wins.
PART_PEAKS: dict[str, Peak] = {
    "H100 PCIe": Peak(800.0, 2.0),
    "H100 NVL": Peak(850.0, 3.9),
    "H100": Peak(1000.0, 3.35),  # SXM5: 989 TFLOP/s dense fp16, 3.35 TB/s HBM3
    "H200": Peak(1000.0, 4.8),
    "H20": Peak(150.0, 4.0),
    "GH200": Peak(1000.0, 4.9),
    "A100": Peak(312.0, 2.04),
    "L40S": Peak(370.0, 0.87),
    "B200": Peak(2300.0, 8.0),
}
UNKNOWN_PART = Peak(3000.0, 10.0)  # faster than any GPU of this generation: only gross cheats trip it


def part_peak(gpu_name: str) -> Peak:
    """The peaks of the part whose name contains a PART_PEAKS key (most specific first)."""
    for key in sorted(PART_PEAKS, key=len, reverse=True):
        if key.lower() in gpu_name.lower():
            return PART_PEAKS[key]
    return UNKNOWN_PART


@dataclass(frozen=True)
class DeviceProfile:
    """One GPU as the proposers, the cost model and the checks see it: its arch, its name, its SMs
    and L2 (the live device's where there is one, else the arch's reference part), and the peak
    rates that scale speed estimates (the arch's reference part: they rank, they never refuse)."""

    arch: str
    name: str
    sm_count: int
    l2_bytes: int
    peak_tflops: float
    dram_tbps: float
    clock_mhz: float | None = None  # the SM clock's maximum, where the live device reports it

    @property
    def limits(self) -> ArchLimits:
        """The arch's limits with this device's SM count and L2."""
        return replace(arch_limits(self.arch), sm_count=self.sm_count, l2_bytes=self.l2_bytes)

    @classmethod
    def of_arch(cls, arch: str) -> "DeviceProfile":
        lim = arch_limits(arch)
        return cls(arch=arch, name=f"reference part of {arch}", sm_count=lim.sm_count, l2_bytes=lim.l2_bytes,
                   peak_tflops=lim.peak_tflops, dram_tbps=lim.dram_tbps)

    @classmethod
    def live(cls, arch: str | None = None, device=None) -> "DeviceProfile":
        """The current (or given) CUDA device, when its arch is `arch` (or any, for None); else the
        reference part of arch."""
        try:
            import torch

            if torch.cuda.is_available():
                idx = torch.cuda.current_device() if device is None else torch.device(device).index or 0
                p = torch.cuda.get_device_properties(idx)
                found = arch_from_capability(p.major, p.minor)
                if arch is None or found == arch:
                    clock = getattr(p, "clock_rate", None)
                    return replace(cls.of_arch(found), name=p.name, sm_count=p.multi_processor_count,
                                   l2_bytes=getattr(p, "L2_cache_size", 0) or arch_limits(found).l2_bytes,
                                   clock_mhz=clock / 1000 if clock else None)
        except Exception:  # noqa: BLE001 - no usable GPU here: the arch's reference part
            pass
        return cls.of_arch(arch or DEFAULT_ARCH)

