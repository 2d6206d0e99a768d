"""Cheats that need a real GPU kernel: written in Triton (imported lazily)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _wild_store_kernel(ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK).to(tl.int64) * 1099511627776  # 1 TiB strides: far outside any allocation
    tl.store(ptr + offs, tl.zeros([BLOCK], dtype=tl.float16), mask=offs >= 0)


def wild_store(a, b, c=None):
    c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device) if c is None else c
    _wild_store_kernel[(1,)](c, c.numel(), BLOCK=128)
    return c


@triton.jit
def _side_copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i, mask=i < n), mask=i < n)


_side = {}


def triton_side_stream(a, b, c=None, bias=None):
    """The GEMM (torch) and a Triton copy into c, both on a private stream the caller never
    waits for."""
    c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device) if c is None else c
    s = _side.get(a.device)
    if s is None:
        s = _side[a.device] = torch.cuda.Stream(a.device)
    with torch.cuda.stream(s):
        tmp = torch.matmul(a, b)
        n = c.numel()
        _side_copy_kernel[(triton.cdiv(n, 1024),)](tmp, c, n, BLOCK=1024)
    return c
