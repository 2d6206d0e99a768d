"""GemmBinding: what the backend needs around one GemmConfig's kernel: the host function that
cute.compile takes, arguments that compile it without a GPU, the device pointers of real tensors,
the alignment each pointer is compiled for, and the workspace a call needs."""

from __future__ import annotations

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_ptr

from .config import GemmConfig
from .epilogue import dsl_type
from .gemm import Sm90Gemm


class GemmBinding:
    def __init__(self, cfg: GemmConfig):
        self.cfg = cfg
        # Byte alignment each pointer is compiled for; the kernel's caller checks real tensors against it.
        # TMA needs 16-byte aligned bases; C, bias and a register-stored D are read/written per element.
        self.align = {"a": 16, "b": 16, "c": 2, "d": 16 if cfg.tma_store else 2, "bias": 2}
        if cfg.has_workspace:
            self.align["w"] = 16

    def entry(self):
        """The host function cute.compile takes: a bound jit method of a fresh kernel object."""
        return Sm90Gemm(self.cfg)

    def workspace_shape(self, m: int, n: int) -> tuple[int, ...] | None:
        """The fp32 workspace a call on the kernel's m x n output (kernel_extents) needs, or None.
        split-K: a (split_k, M, N) partial sum per K slice, written then read by every call. stream-K:
        one partial tile per CTA followed by one Int32 flag per CTA; the flags must start at zero
        (each is raised once and reset by the tile's owner)."""
        cfg = self.cfg
        if cfg.split:
            return (cfg.split_k, m, n)
        if cfg.stream_k:
            return (cfg.sm_count * cfg.tile_elems + cfg.sm_count,)
        return None

    def workspace_addresses(self, d: int, w: int | None = None) -> tuple[int, int]:
        """(workspace, stream-K flags) addresses: the flags follow the per-CTA partial tiles; both point
        at D where the kernel has no workspace (never read)."""
        w = d if w is None else w
        return w, (w + 4 * self.cfg.sm_count * self.cfg.tile_elems if self.cfg.stream_k else w)

    def _pointers(self, a, b, c, d, bias, w=None):
        """The kernel's pointer arguments as DSL pointers, from addresses."""
        cfg, align = self.cfg, self.align
        ab, dt = dsl_type(cfg.ab_dtype), dsl_type(cfg.d_dtype)
        gmem = cute.AddressSpace.gmem
        ptrs = [make_ptr(ab, a, gmem, assumed_align=align["a"]), make_ptr(ab, b, gmem, assumed_align=align["b"]),
                make_ptr(dt, c, gmem, assumed_align=align["c"]), make_ptr(dt, d, gmem, assumed_align=align["d"]),
                make_ptr(dt, bias, gmem, assumed_align=align["bias"])]
        w, flags = self.workspace_addresses(d, w)
        return (*ptrs, make_ptr(cutlass.Float32, w, gmem, assumed_align=align.get("w", 2)),
                make_ptr(cutlass.Int32, flags, gmem, assumed_align=4 if cfg.stream_k else 2))

    def example_args(self, max_active_clusters: int):
        """Arguments that compile the kernel without a GPU (the addresses are never dereferenced; a
        shape-generic kernel's extents are run-time values, any will do)."""
        return (*self._pointers(256, 256, 256, 256, 256, 256), 128, 128, 128, max_active_clusters, cuda.CUstream(0))

    def kernel_extents(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """(M, N, K) as the kernel sees them: with swap_ab it computes D^T, N x M."""
        return (n, m, k) if self.cfg.swap_ab else (m, n, k)

    def call_args(self, a, b, c, d, bias, w=None, *, addresses: bool = False):
        """The compiled kernel's arguments (less the stream) for torch tensors: device addresses (as DSL
        pointers, or as plain ints for a kernel compiled with TVM-FFI; no dlpack, no host sync) and the
        kernel's extents. w: the workspace, None without one. With swap_ab the kernel's A is the
        caller's B (and its B the caller's A): the same memory."""
        extents = self.kernel_extents(a.shape[0], b.shape[1], a.shape[1])
        if self.cfg.swap_ab:
            a, b = b, a
        raw = (a.data_ptr(), b.data_ptr(), c.data_ptr(), d.data_ptr(), bias.data_ptr(),
               w.data_ptr() if w is not None else None)
        if addresses:
            return (*raw[:5], *self.workspace_addresses(raw[3], raw[5]), *extents)
        return (*self._pointers(*raw), *extents)
