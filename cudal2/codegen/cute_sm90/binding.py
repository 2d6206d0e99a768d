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
        """The fp32 workspace a call on an m x n output needs, or None. split-K: a (split_k, M, N)
        partial sum per K slice, written then read by every call. stream-K: one partial tile per CTA
        followed by one Int32 flag per CTA; the flags must start at zero (each is raised once and
        reset by the tile's owner)."""
        cfg = self.cfg
        if cfg.split:
            return (cfg.split_k, m, n)
        if cfg.stream_k:
            return (cfg.sm_count * cfg.tile_elems + cfg.sm_count,)
        return None

    def _pointers(self, a, b, c, d, bias, w=None):
        cfg, align = self.cfg, self.align
        ab, dt = dsl_type(cfg.ab_dtype), dsl_type(cfg.d_dtype)
        gmem = cute.AddressSpace.gmem
        ptrs = [make_ptr(ab, a, gmem, assumed_align=align["a"]), make_ptr(ab, b, gmem, assumed_align=align["b"]),
                make_ptr(dt, c, gmem, assumed_align=align["c"]), make_ptr(dt, d, gmem, assumed_align=align["d"]),
                make_ptr(dt, bias, gmem, assumed_align=align["bias"])]
        workspace = flags = None
        if cfg.has_workspace:
            workspace = make_ptr(cutlass.Float32, w, gmem, assumed_align=align["w"])
        if cfg.stream_k:
            flags = make_ptr(cutlass.Int32, w + 4 * cfg.sm_count * cfg.tile_elems, gmem, assumed_align=4)
        return (*ptrs, workspace, flags)

    def example_args(self, max_active_clusters: int):
        """Arguments that compile the kernel without a GPU (the addresses are never dereferenced)."""
        return (*self._pointers(256, 256, 256, 256, 256, 256), max_active_clusters, cuda.CUstream(0))

    def pointer_args(self, a, b, c, d, bias, w=None):
        """Device addresses of torch tensors as DSL pointers: no dlpack, no host sync. w: the workspace
        (workspace_shape, fp32), ignored without one. With swap_ab the kernel's A is the caller's B (and
        its B the caller's A): the same memory."""
        if self.cfg.swap_ab:
            a, b = b, a
        return self._pointers(a.data_ptr(), b.data_ptr(), c.data_ptr(), d.data_ptr(), bias.data_ptr(),
                              w.data_ptr() if w is not None else None)
