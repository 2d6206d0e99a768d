"""cudal2: find GEMM kernels faster than the vendor library, shape by shape."""

from .codegen import available_backends, get_backend
from .ir import Epilogue, GemmProblem, KernelSpec, SpecError

__version__ = "0.1.0"

__all__ = ["Epilogue", "GemmProblem", "KernelSpec", "SpecError", "__version__", "available_backends",
           "get_backend"]
