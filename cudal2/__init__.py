"""cudal2: find GEMM kernels faster than the vendor library, shape by shape."""

from .codegen import available_backends, get_backend
from .ir import Epilogue, GemmProblem, KernelSpec, SpecError
from .api import search

from .version import __version__

# Loaded on first use so that `import cudal2` stays cheap (no torch, optuna or evaluator):
# name -> (module, attribute)
_LAZY = {
    "matmul": ("cudal2.ops", "matmul"),
    "linear": ("cudal2.ops", "linear"),
    "precompile": ("cudal2.api", "precompile"),
    "set_table": ("cudal2.ops", "set_table"),
    "route_linears": ("cudal2.ops", "route_linears"),
    "check_routes": ("cudal2.route_check", "check_routes"),
    "tune_model": ("cudal2.model_tuning", "tune_model"),
    "tune_untuned": ("cudal2.model_tuning", "tune_untuned"),
    "untuned_problems": ("cudal2.ops", "untuned_problems"),
    "SearchResult": ("cudal2.tuner.outcome", "SearchResult"),
    "Store": ("cudal2.store.store", "Store"),
    "TunedTable": ("cudal2.store.table", "TunedTable"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cudal2' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["Epilogue", "GemmProblem", "KernelSpec", "SearchResult", "SpecError", "Store", "TunedTable",
           "__version__", "available_backends", "check_routes", "get_backend", "linear", "matmul", "precompile", "route_linears", "search",
           "set_table", "tune_model", "tune_untuned", "untuned_problems"]
