"""CuteDslKernel: a compiled Hopper GEMM as a torch callable, kernel(a, b, c=None, bias=None) -> d.

A kernel compiled for one shape serves that problem; a shape-generic one every M, N, K of its
problem's class (dtypes, layout, epilogue) whose TMA'd leading dimensions are multiples of 8
elements: the extents are read off a and b, and a shape the kernel cannot serve is a ValueError
that says why, before anything is launched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..base import Source
from ..operands import call_extents, device_errors, operand_errors, operand_strides, torch_dtype
from ..workspace import Workspace
from .config import whole_tiles

# fp32 (split_k, M, N): also keeps every flat index within int32
MAX_WORKSPACE_BYTES = 1 << 30
MAX_ELEMENTS = 2**31 - 1  # a shape-generic kernel indexes each operand with 32-bit extents and strides


def largest_operand(m: int, n: int, k: int) -> int:
    """The element count of the largest of an m x n x k product's A, B and D (what MAX_ELEMENTS bounds)."""
    return max(m * k, n * k, m * n)


@dataclass
class CuteDslKernel:
    """With c given, the result is written into c (which is also read when beta != 0); otherwise a
    new (M, N) row-major tensor is returned. No host synchronization, no allocation beyond that
    output (and, with split-K or stream-K, the workspace on a device's first call, grown when a
    shape-generic kernel meets a larger output); launches on torch's current stream."""

    source: Source
    _fn: Any
    _binding: Any  # cute_sm90.binding.GemmBinding: pointers, alignment and workspace of this kernel
    loaded_from_disk: bool = False
    _keepalive: Any = None  # the loaded binary module owns the execution engine behind _fn
    _workspace: Workspace | None = None  # made with the kernel's binding (stream-K wants it zeroed)
    # compiled with TVM-FFI: _fn takes addresses and extents as plain ints and the stream as its handle,
    # a call of about a microsecond; without it the DSL's own executor converts every argument
    ffi: bool = False

    @property
    def dynamic(self) -> bool:
        return self._binding.cfg.dynamic

    def _workspace_shape(self, m: int, n: int, k: int):
        km, kn, _ = self._binding.kernel_extents(m, n, k)
        return self._binding.workspace_shape(km, kn)

    @property
    def workspace_bytes(self) -> int:
        """Bytes of the split-K or stream-K workspace for the problem the kernel was built for."""
        shape = self._workspace_shape(*self.source.problem.shape)
        return 0 if shape is None else 4 * math.prod(shape)

    def _workspace_for(self, device, m: int, n: int, k: int):
        """The fp32 workspace on device, allocated once (grown for a larger output) and reused by every
        later call (a launch on another stream waits for the previous one's: cudal2.codegen.workspace)."""
        shape = self._workspace_shape(m, n, k)
        if shape is None:
            return None
        if self._workspace is None:
            self._workspace = Workspace(zeroed=bool(self._binding.cfg.stream_k))  # stream-K flags start at 0
        return self._workspace.for_call(device, math.prod(shape))

    def workspace_intact(self) -> bool:
        """Whether the kernel kept inside its own workspace (cudal2.codegen.workspace)."""
        return self._workspace is None or self._workspace.intact()

    def __call__(self, a, b, c=None, bias=None):
        import torch
        import cuda.bindings.driver as cuda

        p = self.source.problem
        m, n, k = self._extents(a, b)
        errors = operand_errors(p, a, b, c, bias, m, n, k)
        errors += device_errors([a, b, c, bias]) if not errors else []
        if errors:
            label = p.label() if (m, n, k) == p.shape else p.class_label()
            raise ValueError(f"cute_dsl kernel for {label}: " + "; ".join(errors))
        if c is None:
            d = torch.empty((m, n), dtype=torch_dtype(p.c_dtype), device=a.device)
            c_in = d
        else:
            d = c_in = c
        bias_t = bias if bias is not None else d
        align = self._binding.align
        for name, t in (("a", a), ("b", b), ("c", c_in), ("d", d), ("bias", bias_t)):
            if t.data_ptr() % align[name]:
                raise ValueError(f"operand {name} starts at an address not aligned to {align[name]} bytes "
                                 f"(this kernel was compiled for it); pass a freshly allocated or .clone()d tensor")
        raw_stream = torch.cuda.current_stream(a.device).cuda_stream
        ws = self._workspace_for(a.device, m, n, k)
        if ws is not None:
            self._workspace.follow_device(a.device)
        if self.ffi:
            self._fn(*self._binding.call_args(a, b, c_in, d, bias_t, ws, addresses=True), raw_stream)
        else:
            self._fn(*self._binding.call_args(a, b, c_in, d, bias_t, ws), cuda.CUstream(raw_stream))
        return d

    def _check_bindable(self, m: int, n: int, k: int) -> None:
        p = self.source.problem
        if self.dynamic:
            why = shape_refusal(self._binding.cfg, m, n, k)
            if why:
                raise ValueError(f"cute_dsl kernel for {p.class_label()} cannot run {m}x{n}x{k}: {why}")
        elif (m, n, k) != p.shape:
            raise ValueError(f"cute_dsl kernel for {p.label()} cannot run {m}x{n}x{k}: it was compiled for its shape")

    def native_args(self, m: int, n: int, k: int, device):
        """What the C++ launcher of compiled graphs (cudal2.codegen.native_launch) needs to run calls of exactly
        m x n x k on device: the kernel's TVM-FFI function, its workspace (allocated now) and extents;
        None where the kernel has no TVM-FFI function. The caller vouches for what bind() says."""
        from cudal2.codegen.native_launch import NativeArgs, tvm_ffi_function

        self._check_bindable(m, n, k)
        function = tvm_ffi_function(self._fn) if self.ffi else None
        if function is None:
            return None
        binding = self._binding
        ws = self._workspace_for(device, m, n, k)
        w, flags = binding.workspace_addresses(0, ws.data_ptr()) if ws is not None else (0, 0)
        return NativeArgs(function, w, flags, *binding.kernel_extents(m, n, k), binding.cfg.swap_ab, keepalive=self)

    def bind(self, m: int, n: int, k: int, device):
        """A launcher for calls of exactly m x n x k on device: run(a, b, d, bias) enqueues the GEMM
        into d on the current stream and returns nothing. The caller vouches, once, for what a call
        would check each time: a and b hold the problem's operands in its layout (any view of that
        memory; only addresses are read), d is a fresh row-major output, bias is None or the
        problem's, all on device, a and b 16-byte aligned. Nothing is checked per call: this is the
        path of cudal2.matmul/linear, whose per-call cost must stay at torch's."""
        import torch

        p = self.source.problem
        self._check_bindable(m, n, k)
        index = device.index if device.index is not None else torch.cuda.current_device()
        current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        native = self.native_args(m, n, k, device) if current_stream is not None else None
        if native is None:
            a_strides, b_strides = operand_strides(p, m, n, k)

            def run(a, b, d, bias):  # the DSL's executor: correct, not fast
                self(a.as_strided((m, k), a_strides), b.as_strided((k, n), b_strides), d.view(m, n), bias=bias)
            run.launch_path = "executor"  # (the op times its launch cost apart from the TVM-FFI path's)
            return run
        # without a workspace its two pointers point at D and are never read. (Called through the DSL's
        # wrapper of the function, as measured; the C++ launcher calls the function itself.)
        fn, w, flags, km, kn, kk, swap = self._fn, native.workspace, native.flags, native.km, native.kn, \
            native.kk, native.swap
        follow = self._workspace.follow_stream if w else None  # (cudal2.codegen.workspace: one stream at a time)

        def run(a, b, d, bias):
            if follow is not None:
                follow(index)
            pa, pb, pd = (b.data_ptr(), a.data_ptr(), d.data_ptr()) if swap else \
                (a.data_ptr(), b.data_ptr(), d.data_ptr())
            fn(pa, pb, pd, pd, pd if bias is None else bias.data_ptr(), w or pd, flags or pd, km, kn, kk,
               current_stream(index))
        run.launch_path = ""  # one kernel, through TVM-FFI
        return run

    def _extents(self, a, b) -> tuple[int, int, int]:
        """(M, N, K) of this call: the problem's, or a shape-generic kernel's a's and b's, once this
        kernel can serve them."""
        p = self.source.problem
        if not self.dynamic:
            return p.m, p.n, p.k
        m, n, k = call_extents(f"cute_dsl kernel for {p.class_label()}", a, b)
        why = shape_refusal(self._binding.cfg, m, n, k)
        if why:
            raise ValueError(f"cute_dsl kernel for {p.class_label()} cannot run {m}x{n}x{k}: {why}")
        return m, n, k


def shape_refusal(cfg, m: int, n: int, k: int) -> str:
    """Why a shape-generic kernel of config cfg cannot compute an m x n x k product, or "". The
    checks the backend makes for a (problem, spec) pair that depend on the extents, plus the variant
    the kernel was compiled for."""
    if min(m, n, k) < 1:  # (call_extents refuses these before a call gets here)
        return "an empty product (call torch)"
    km, kn, kk = (n, m, k) if cfg.swap_ab else (m, n, k)
    extent = {"m": km, "n": kn, "k": kk}
    odd = sorted(name for name in cfg.tma_leading_extents if extent[name] % 8)
    if odd:
        return (f"TMA needs the leading dimensions ({', '.join(odd)} of the kernel's {km}x{kn}x{kk}) to be "
                "multiples of 8 elements; use a kernel compiled for this shape or the registers epilogue")
    if largest_operand(km, kn, kk) > MAX_ELEMENTS:
        return f"an operand of over {MAX_ELEMENTS} elements (the kernel indexes with 32-bit extents)"
    if cfg.split:
        if -(-kk // cfg.tile_k) < cfg.split_k:
            return f"K={kk} has fewer than split_k={cfg.split_k} k-tiles of {cfg.tile_k}"
        if 4 * cfg.split_k * km * kn > MAX_WORKSPACE_BYTES:
            return f"the split-K workspace would pass {MAX_WORKSPACE_BYTES >> 20} MiB"
        if cfg.whole_tiles and not whole_tiles(km, kn, cfg.tile_m, cfg.tile_n, cfg.cluster_m, cfg.cluster_n):
            return (f"this variant stores whole {cfg.tile_m}x{cfg.tile_n} partial tiles in clusters of "
                    f"{cfg.cluster_m}x{cfg.cluster_n}, and {km}x{kn} has edge tiles or an overhanging "
                    "cluster; compile the variant for this shape")
    return ""
