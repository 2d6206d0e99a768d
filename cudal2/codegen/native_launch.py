"""The launch path of a torch.compile'd graph into tuned CuTe DSL kernels: a small C++ extension.

Why. A traced graph reaches a custom op through torch's dispatcher. With a Python kernel behind it
(ops._run_linear), every call crosses back into Python and converts its arguments: on an H100 host,
2026-11-26, that cost a compiled call about 7 us more than inductor's own GEMM call
(docs/results.md). native_launch.cpp implements cudal2::linear_slot and cudal2::matmul_slot in C++:
the dispatcher calls it directly, it checks the call against what its slot was bound for, allocates
the output and calls the kernel's TVM-FFI function with plain integers, as the eager launcher does.

How. While torch.compile traces a call the table serves, ops.py asks bind() for a slot: the kernel's
TVM-FFI function, its workspace and extents are written into the extension's slot table, and the
graph calls the slot op with that number. A call that does not fit its slot (another shape, layout,
device, an unaligned operand, a slot never bound in this process) runs torch's own op.

The extension is compiled once per source, torch, apache-tvm-ffi and compiler (a few seconds of g++)
under cache_dir()/native_launch. Where it cannot be built (no C++ compiler, no apache-tvm-ffi) or a
kernel has no TVM-FFI function, bind() returns None and the graph calls the Python op instead; the
first failure is said once, as a warning.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from threading import Lock
from typing import Any, NamedTuple

import torch

from cudal2.settings import settings
from cudal2 import native_build, paths
from cudal2.codegen.operands import torch_dtype

SOURCE = Path(__file__).with_name("native_launch.cpp")
MAX_SLOTS = 4096  # native_launch.cpp's kSlots
ENV_DISABLE = "CUDAL2_NATIVE_LAUNCH"  # "0": compiled graphs call the Python op (for comparison)


class NativeArgs(NamedTuple):
    """What the C++ launcher needs of a bound kernel: its TVM-FFI function and the integers it is
    called with besides the operands' addresses and the stream."""

    function: Any  # a tvm_ffi.Function (its handle is what the slot keeps)
    workspace: int  # address, 0 without one
    flags: int  # stream-K flags' address, 0 without
    km: int
    kn: int
    kk: int
    swap: bool  # the kernel's A is the caller's B
    keepalive: Any = None  # what owns the function and the workspace


_lock = Lock()
_library: Path | None | bool = None  # None: not tried; False: failed (said once)
_slots: dict[tuple, int] = {}  # (call class, out dtype) -> slot
_bound: list[NativeArgs] = []  # slot -> its arguments, kept alive as long as the process


def _toolchain() -> tuple[list[str], list[str]]:
    """(compile flags, link flags) for an extension against this torch and apache-tvm-ffi."""
    import tvm_ffi.libinfo as ffi_info

    ffi_lib = Path(ffi_info.find_libtvm_ffi()).parent
    cflags, ldflags = native_build.torch_extension_flags("c++20", ["c10", "torch_cpu", "torch"])
    cflags += [f"-I{ffi_info.find_include_path()}", f"-I{ffi_info.find_dlpack_include_path()}"]
    ldflags += [f"-L{ffi_lib}", "-ltvm_ffi", f"-Wl,-rpath,{ffi_lib}"]
    return cflags, ldflags


def _build() -> Path:
    """The extension's shared library, compiled if this source/toolchain has none yet."""
    import tvm_ffi

    cflags, ldflags = _toolchain()
    return native_build.library(SOURCE, native_build.cxx(), cflags, ldflags,
                                [torch.__version__, str(tvm_ffi.__version__)], paths.cache_dir() / "native_launch",
                                "cudal2_native_launch", ".so")


def library() -> Path | None:
    """The loaded extension (built on first use), or None where it cannot be: said once."""
    global _library
    with _lock:
        if _library is None:
            if not settings().native_launch:
                _library = False
                return None
            try:
                path = _build()
                torch.ops.load_library(str(path))
                _library = path
            except Exception as e:  # noqa: BLE001 - any failure leaves the Python op in place
                _library = False
                warnings.warn(f"cudal2: compiled graphs call the Python op ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}); its host cost is higher",
                              RuntimeWarning, stacklevel=3)
        return _library or None


def bind(call: tuple, out_dtype: torch.dtype, args: NativeArgs | None, device: torch.device) -> int | None:
    """The slot of a call class (ops._call_class) whose kernel takes the native path, binding it on
    first use; None where the native path cannot serve it (then the graph calls the Python op)."""
    if args is None or library() is None:
        return None
    key = (call, out_dtype)
    with _lock:
        slot = _slots.get(key)
        if slot is not None:
            return slot
        if len(_bound) >= MAX_SLOTS:
            return None
        slot = len(_bound)
        fn = args.function
        handle = fn.__chandle__()
        m, n, k, dtype, layout, bias = call[:6]
        torch.ops.cudal2.native_bind(slot, handle, args.workspace, args.flags, args.km, args.kn, args.kk, args.swap,
                                     m, n, k, torch_dtype(dtype), out_dtype, device, layout, bias)
        _bound.append(args)
        _slots[key] = slot
        return slot


def forget() -> None:
    """Bind every call class afresh from now on (the table changed). Slots already bound stay as they
    are: a graph traced before keeps the kernel it was traced with."""
    with _lock:
        _slots.clear()


def tvm_ffi_function(fn) -> Any | None:
    """The tvm_ffi.Function behind a CuTe DSL compiled function (compiled or loaded from disk), or None."""
    inner = fn.__tvm_ffi_object__() if hasattr(fn, "__tvm_ffi_object__") else fn
    return inner if callable(getattr(inner, "__chandle__", None)) and inner.__chandle__() else None


def loaded() -> bool:
    """Whether the extension is loaded in this process (for tests and benchmarks)."""
    return bool(_library)

