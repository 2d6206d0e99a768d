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
from typing import Mapping, TypeVar


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


_Figures = TypeVar("_Figures")


def _by_part(table: Mapping[str, _Figures], gpu_name: str | None) -> _Figures | None:
    """The value of the most specific (longest) key of table that gpu_name contains, or None."""
    name = (gpu_name or "").lower()
    for key in sorted(table, key=len, reverse=True):
        if key.lower() in name:
            return table[key]
    return None


def part_peak(gpu_name: str) -> Peak:
    """The peaks of the part whose name contains a PART_PEAKS key (most specific first)."""
    return _by_part(PART_PEAKS, gpu_name) or UNKNOWN_PART


@dataclass(frozen=True)
class PartFigures:
    """A known part's published figures: what a cost model needs to tell two GPUs of one arch apart
    where the live device does not report them. None: not published for this part."""

    dram_tbps: float
    mem_gib: float
    sm_count: int | None = None  # where it differs from the arch's reference part
    clock_mhz: float | None = None  # the SM clock's maximum (boost)
    power_w: float | None = None  # the board's power limit


# Vendors' published figures (NVIDIA's datasheets: H100 Tensor Core GPU, H200 Tensor Core GPU, A100
# Tensor Core GPU, and the H20's product brief), keyed by a substring of torch.cuda.get_device_name();
# the most specific (longest) match wins, so "H200" is tried before "H20" and "H100 NVL" before "H100".
KNOWN_PARTS: dict[str, PartFigures] = {
    "H100 PCIe": PartFigures(dram_tbps=2.0, mem_gib=80, sm_count=114, clock_mhz=1755, power_w=350),
    "H100 NVL": PartFigures(dram_tbps=3.9, mem_gib=94, clock_mhz=1785, power_w=400),
    "H100": PartFigures(dram_tbps=3.35, mem_gib=80, clock_mhz=1980, power_w=700),  # SXM5, HBM3
    "H200": PartFigures(dram_tbps=4.8, mem_gib=141, clock_mhz=1980, power_w=700),  # SXM, HBM3e
    "H20": PartFigures(dram_tbps=4.0, mem_gib=96, power_w=400),
    "A100-SXM4-80GB": PartFigures(dram_tbps=2.039, mem_gib=80, clock_mhz=1410, power_w=400),
    "A100 80GB PCIe": PartFigures(dram_tbps=1.935, mem_gib=80, clock_mhz=1410, power_w=300),
    "A100-PCIE-40GB": PartFigures(dram_tbps=1.555, mem_gib=40, clock_mhz=1410, power_w=250),
    "A100": PartFigures(dram_tbps=1.555, mem_gib=40, clock_mhz=1410, power_w=400),  # SXM4 40GB
}
# The part each arch's reference figures (ARCHS) describe: where neither the device nor the table
# says, a DeviceProfile's figures are this part's.
REFERENCE_PARTS = {"sm_80": "A100-SXM4-80GB", "sm_90": "H100", "sm_90a": "H100"}


def known_part(gpu_name: str) -> PartFigures | None:
    """The published figures of the part whose name contains a KNOWN_PARTS key (most specific first)."""
    return _by_part(KNOWN_PARTS, gpu_name)


def _positive(value) -> float | None:
    try:
        return float(value) if value and float(value) > 0 else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class DeviceProfile:
    """One GPU as the proposers, the cost model and the checks see it: its arch, its name, its SMs
    and L2 (the live device's where there is one, else the arch's reference part), the peak
    rates that scale speed estimates, and its memory, clocks and power where known (the live
    device's, else the published figures of a known part by name, else unset: figures() fills
    those from the arch's reference part)."""

    arch: str
    name: str
    sm_count: int
    l2_bytes: int
    peak_tflops: float
    dram_tbps: float
    clock_mhz: float | None = None  # the SM clock's maximum
    mem_bytes: int | None = None  # device memory
    mem_clock_mhz: float | None = None
    bus_width_bits: int | None = None
    power_w: float | None = None  # the board's power limit
    smem_per_block: int | None = None  # bytes a block may opt in to

    @property
    def limits(self) -> ArchLimits:
        """The arch's limits with this device's SM count and L2."""
        return replace(arch_limits(self.arch), sm_count=self.sm_count, l2_bytes=self.l2_bytes)

    def figures(self) -> dict[str, float]:
        """The numbers a cost model reads, none missing: this device's where known, else the arch's
        reference part's (a model's inputs are never NaN: the numpy walk has no missing-value rule)."""
        ref = KNOWN_PARTS[REFERENCE_PARTS[self.arch]] if self.arch in REFERENCE_PARTS else None
        lim = arch_limits(self.arch)
        mem = self.mem_bytes / 2**30 if self.mem_bytes else (ref.mem_gib if ref else lim.largest_part_memory / 2**30)
        return {"sm_count": float(self.sm_count), "l2_mib": self.l2_bytes / 2**20, "dram_tbps": self.dram_tbps,
                "mem_gib": float(mem), "clock_mhz": float(self.clock_mhz or (ref and ref.clock_mhz) or 0.0),
                "power_w": float(self.power_w or (ref and ref.power_w) or 0.0),
                "smem_per_block_kib": (self.smem_per_block or lim.smem_per_block) / 1024}

    def figures_key(self) -> tuple:
        """What the cost model sees of this device: two devices with one key are one GPU to it."""
        return (self.arch, self.peak_tflops, *sorted(self.figures().items()))

    @classmethod
    def of_arch(cls, arch: str) -> "DeviceProfile":
        lim = arch_limits(arch)
        return cls(arch=arch, name=f"reference part of {arch}", sm_count=lim.sm_count, l2_bytes=lim.l2_bytes,
                   peak_tflops=lim.peak_tflops, dram_tbps=lim.dram_tbps)

    @classmethod
    def of_part(cls, gpu_name: str, arch: str = DEFAULT_ARCH) -> "DeviceProfile":
        """A GPU known by name only (a measurement's, in a store or an export): the arch's reference
        part with the published figures of the part the name names, where it is a known one."""
        base = replace(cls.of_arch(arch), name=gpu_name or f"reference part of {arch}")
        part = known_part(gpu_name)
        if part is None:
            return base
        return replace(base, sm_count=part.sm_count or base.sm_count, dram_tbps=part.dram_tbps,
                       mem_bytes=int(part.mem_gib * 2**30), clock_mhz=part.clock_mhz, power_w=part.power_w)

    @classmethod
    def from_properties(cls, props, arch: str, power_w: float | None = None) -> "DeviceProfile":
        """The profile of a device from torch.cuda.get_device_properties(): each figure the
        properties hold (torch versions differ in which: each is read with getattr, and 0 counts as
        unreported, as CUDA 13 reports the deprecated clocks), else the known part's, else unset."""
        base = cls.of_part(props.name, arch)
        clock = _positive(getattr(props, "clock_rate", None))  # kHz
        mem_clock = _positive(getattr(props, "memory_clock_rate", None))  # kHz
        bus = _positive(getattr(props, "memory_bus_width", None))  # bits
        # double data rate: two transfers a clock on each of the bus's bits
        dram = 2 * mem_clock * 1e3 * bus / 8 / 1e12 if mem_clock and bus else None
        smem = _positive(getattr(props, "shared_memory_per_block_optin", None))
        return replace(base, sm_count=int(props.multi_processor_count),
                       l2_bytes=int(_positive(getattr(props, "L2_cache_size", None)) or base.l2_bytes),
                       dram_tbps=round(dram, 3) if dram else base.dram_tbps,
                       mem_bytes=int(_positive(getattr(props, "total_memory", None)) or base.mem_bytes or 0) or None,
                       clock_mhz=clock / 1000 if clock else base.clock_mhz,
                       mem_clock_mhz=mem_clock / 1000 if mem_clock else None, bus_width_bits=int(bus) if bus else None,
                       power_w=power_w or base.power_w, smem_per_block=int(smem) if smem else None)

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
                    return cls.from_properties(p, found, power_w=_power_limit_w(getattr(p, "uuid", None)))
        except Exception:  # noqa: BLE001 - no usable GPU here: the arch's reference part
            pass
        return cls.of_arch(arch or DEFAULT_ARCH)


def _power_limit_w(uuid) -> float | None:
    """The board's enforced power limit through NVML, where nvidia-ml-py is installed (torch does
    not report it); None elsewhere. By UUID: NVML's indices ignore CUDA_VISIBLE_DEVICES."""
    if not uuid:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{str(uuid).removeprefix('GPU-')}")
            return pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML here: the table's figure, if any
        return None
