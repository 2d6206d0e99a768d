"""The contract between proposers, backends and the evaluator. Imports nothing of cudal2."""

from .capabilities import Capabilities, options
from .errors import SpecError, Violation
from .hardware import ARCHS, DEFAULT_ARCH, DTYPE_BYTES, ArchLimits, DeviceProfile, arch_from_capability, arch_limits
from .model import IR_VERSION
from .problem import Epilogue, GemmProblem
from .spec import KernelSpec, check_compatible

__all__ = [
    "ARCHS", "DEFAULT_ARCH", "DTYPE_BYTES", "IR_VERSION", "ArchLimits", "Capabilities", "DeviceProfile", "Epilogue", "GemmProblem",
    "KernelSpec", "SpecError", "Violation", "arch_from_capability", "arch_limits", "check_compatible",
    "options",
]
