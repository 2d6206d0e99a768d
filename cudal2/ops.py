"""cudal2.matmul and cudal2.linear: run the tuned kernel for a shape, or torch where none is
tuned. Registered as torch custom ops (cudal2::matmul, cudal2::linear) with fake (meta)
implementations, so torch.compile traces through them as single opaque nodes.

Never slower: a tuned kernel is used only where the table records a measured speedup over
torch.matmul above 1 on this GPU. Everything else (CPU tensors, dtypes other than fp16/bf16,
non-2D operands, strides that are neither row- nor column-major, shapes never tuned, shapes the
IR refuses, such as one no GPU cudal2 targets could hold) runs torch.matmul /
torch.nn.functional.linear. So does a call whose tuned kernel runs out of device memory (its
split-K workspace, say): torch, which needs no workspace of ours, gets the call.
"""

from __future__ import annotations

import os
from threading import Lock
from typing import Optional

import torch

from .ir import Epilogue, GemmProblem, SpecError
from .search.table import TunedTable

_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
_lock = Lock()
_table: TunedTable | None = None
# (m, n, k, dtype, layout, bias, device index) -> compiled kernel, or None for "use torch"
_kernels: dict[tuple, object] = {}


def tuned_table() -> TunedTable:
    """The table in use: set_table()'s, else $CUDAL2_TABLE, else the default store (read once)."""
    global _table
    with _lock:
        if _table is None:
            _table = TunedTable.default()
        return _table


def set_table(table: TunedTable | str | os.PathLike | None) -> None:
    """Use this table (or JSON file) from now on; None reloads the default on next use."""
    global _table
    with _lock:
        _table = TunedTable.load(table) if isinstance(table, (str, os.PathLike)) else table
        _kernels.clear()


def _layout_letter(t: torch.Tensor) -> str | None:
    if t.is_contiguous():
        return "N"
    if t.t().is_contiguous():
        return "T"
    return None


def _kernel_for(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None):
    """The tuned kernel for a @ b (+ bias), or None to run torch."""
    if a.device.type != "cuda" or a.dtype not in _DTYPES or b.dtype != a.dtype or b.device != a.device:
        return None
    if bias is not None and (bias.dtype != a.dtype or bias.dim() != 1 or not bias.is_contiguous()):
        return None
    la, lb = _layout_letter(a), _layout_letter(b)
    if la is None or lb is None:
        return None
    m, k = a.shape
    n = b.shape[1]
    key = (m, n, k, a.dtype, la + lb, bias is not None, a.device.index)
    if key in _kernels:
        return _kernels[key]
    try:
        problem = GemmProblem(m=m, n=n, k=k, dtype=_DTYPES[a.dtype], layout=la + lb,
                              epilogue=Epilogue(bias=bias is not None))
    except SpecError:  # a shape the IR refuses (cudal2 never tuned it): torch serves it
        _kernels[key] = None
        return None
    kernel = tuned_kernel(problem, torch.cuda.get_device_name(a.device))
    _kernels[key] = kernel
    return kernel


def tuned_kernel(problem: GemmProblem, gpu: str | None):
    """The compiled tuned kernel for problem on this GPU, or None when the table has none that
    beats torch. A kernel that fails to build falls back to torch too (with a warning)."""
    entry = tuned_table().lookup(problem, gpu=gpu)
    if entry is None:
        return None
    from .codegen import get_backend

    try:
        backend = get_backend(entry.spec.backend)
        return backend.compile(backend.render(problem, entry.spec))
    except Exception as e:  # noqa: BLE001 - the table may name a backend this install cannot build
        import warnings

        warnings.warn(f"cudal2: tuned kernel for {problem.label()} could not be built ({e}); using torch",
                      RuntimeWarning, stacklevel=3)
        return None


def _out_of_memory(what: str, e: Exception) -> None:
    import warnings

    warnings.warn(f"cudal2: the tuned kernel for {what} ran out of device memory ({str(e).splitlines()[0][:200]}); "
                  f"using torch for this call", RuntimeWarning, stacklevel=3)


@torch.library.custom_op("cudal2::matmul", mutates_args=())
def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    kernel = _kernel_for(a, b, None)
    if kernel is not None:
        try:
            return kernel(a, b)
        except torch.OutOfMemoryError as e:
            _out_of_memory(f"{a.shape[0]}x{b.shape[1]}x{a.shape[1]}", e)
    return torch.matmul(a, b)


@_matmul.register_fake
def _(a, b):
    return a.new_empty((a.shape[0], b.shape[1]))


def _matmul_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _matmul_backward(ctx, grad):
    a, b = ctx.saved_tensors
    ga = _matmul(grad, b.t()) if ctx.needs_input_grad[0] else None
    gb = _matmul(a.t(), grad) if ctx.needs_input_grad[1] else None
    return ga, gb


_matmul.register_autograd(_matmul_backward, setup_context=_matmul_setup)


@torch.library.custom_op("cudal2::linear", mutates_args=())
def _linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    kernel = _kernel_for(x, weight.t(), bias)
    if kernel is not None:
        try:
            return kernel(x, weight.t(), bias=bias)
        except torch.OutOfMemoryError as e:
            _out_of_memory(f"{x.shape[0]}x{weight.shape[0]}x{x.shape[1]}", e)
    return torch.nn.functional.linear(x, weight, bias)


@_linear.register_fake
def _(x, weight, bias):
    return x.new_empty((x.shape[0], weight.shape[0]))


def _linear_setup(ctx, inputs, output):
    x, weight, bias = inputs
    ctx.save_for_backward(x, weight)
    ctx.has_bias = bias is not None


def _linear_backward(ctx, grad):
    x, weight = ctx.saved_tensors
    gx = _matmul(grad, weight) if ctx.needs_input_grad[0] else None
    gw = _matmul(grad.t(), x) if ctx.needs_input_grad[1] else None
    gb = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
    return gx, gw, gb


_linear.register_autograd(_linear_backward, setup_context=_linear_setup)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with the tuned kernel where one beats torch.matmul, else torch.matmul."""
    if a.dim() == 2 and b.dim() == 2:
        return torch.ops.cudal2.matmul(a, b)
    return torch.matmul(a, b)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T + bias (nn.Linear) with the tuned kernel where one beats torch, else F.linear."""
    if x.dim() < 2 or weight.dim() != 2:
        return torch.nn.functional.linear(x, weight, bias)
    lead = x.shape[:-1]
    out = torch.ops.cudal2.linear(x.reshape(-1, x.shape[-1]), weight, bias)
    return out.reshape(*lead, weight.shape[0])
