"""The cheaters. Module-level functions (or instances of module-level classes) so that they
pickle by reference into the evaluator's worker process."""

from __future__ import annotations

import os
import time

import torch


def _out(a, b, c):
    return torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device) if c is None else c


def honest(a, b, c=None, bias=None):
    """The control: torch.matmul into the given output."""
    c = _out(a, b, c)
    torch.matmul(a, b, out=c)
    return c


def partial_write(a, b, c=None, bias=None):
    """Computes only the first half of the rows (looks fast, leaves the rest untouched)."""
    c = _out(a, b, c)
    h = max(1, c.shape[0] // 2)
    torch.matmul(a[:h], b, out=c[:h])
    return c


def partial_write_one(a, b, c=None, bias=None):
    """Leaves the last element unwritten: only the poison can see it."""
    c = _out(a, b, c)
    full = torch.matmul(a, b)
    c.view(-1)[:-1].copy_(full.reshape(-1)[:-1])
    return c


_cache: dict = {}


def cached_by_pointer(a, b, c=None, bias=None):
    """Computes once per (pointer, pointer) and copies the remembered result afterwards."""
    c = _out(a, b, c)
    key = (a.data_ptr(), b.data_ptr(), tuple(a.shape), tuple(b.shape))
    if key not in _cache:
        _cache[key] = torch.matmul(a, b)
    c.copy_(_cache[key])
    return c


_previous: dict = {}


def stale_output(a, b, c=None, bias=None):
    """Returns the result of the previous call (computes this one for the next call)."""
    c = _out(a, b, c)
    fresh = torch.matmul(a, b)
    key = (tuple(a.shape), tuple(b.shape), a.device.type)
    c.copy_(_previous.get(key, fresh))
    _previous[key] = fresh
    return c


def fp16_accumulate(a, b, c=None, bias=None, chunk: int = 32):
    """Accumulates in fp16, like an mma with an fp16 accumulator: each K-chunk product is
    exact-ish in fp32 (as one mma), the running sum is rounded to fp16 after every chunk."""
    c = _out(a, b, c)
    m, n, k = a.shape[0], b.shape[1], a.shape[1]
    acc = torch.zeros(m, n, dtype=torch.float16, device=a.device)
    for k0 in range(0, k, chunk):
        part = a[:, k0:k0 + chunk].float() @ b[k0:k0 + chunk].float()
        acc = (acc.float() + part).to(torch.float16)
    c.copy_(acc)
    return c


def write_past_end(a, b, c=None, bias=None):
    """Correct result, plus a few stray stores past the end of the output."""
    c = _out(a, b, c)
    torch.matmul(a, b, out=c)
    tail = c.as_strided((c.numel() + 64,), (1,), c.storage_offset())
    tail[c.numel():].fill_(0)
    return c


def write_before_start(a, b, c=None, bias=None):
    """Correct result, plus stray stores just before the output."""
    c = _out(a, b, c)
    torch.matmul(a, b, out=c)
    before = c.as_strided((64,), (1,), c.storage_offset() - 64)
    before.fill_(0)
    return c


def new_tensor(a, b, c=None, bias=None):
    """Ignores the output it was given and returns a new tensor."""
    return torch.matmul(a, b)


_side = {}


def side_stream(a, b, c=None, bias=None):
    """Launches the GEMM on its own stream and returns at once: the caller's stream (and a
    timer on it) never waits for the work. On the CPU it is just honest."""
    c = _out(a, b, c)
    if not a.is_cuda:
        return honest(a, b, c)
    s = _side.get(a.device)
    if s is None:
        s = _side[a.device] = torch.cuda.Stream(a.device)
    with torch.cuda.stream(s):
        torch.matmul(a, b, out=c)
    return c


def aborts(a, b, c=None, bias=None):
    """Kills its process like a segfault would (SIGABRT)."""
    os.abort()


def hangs(a, b, c=None, bias=None):
    """Never returns."""
    time.sleep(3600)
    return c


def raises(a, b, c=None, bias=None):
    raise RuntimeError("this kernel always fails")


def illegal_address(a, b, c=None, bias=None):
    """GPU only: a Triton kernel that stores through a wild pointer (illegal address)."""
    from .triton_cheats import wild_store

    return wild_store(a, b, c)


def bf16_accumulate(a, b, c=None, bias=None, chunk: int = 32):
    """fp16_accumulate's bf16 twin: the running sum rounded to bf16 after every chunk."""
    c = _out(a, b, c)
    m, n, k = a.shape[0], b.shape[1], a.shape[1]
    acc = torch.zeros(m, n, dtype=torch.bfloat16, device=a.device)
    for k0 in range(0, k, chunk):
        acc = (acc.float() + a[:, k0:k0 + chunk].float() @ b[k0:k0 + chunk].float()).to(torch.bfloat16)
    c.copy_(acc)
    return c


class HonestThenCached:
    """Honest for its first `honest_calls` calls (enough to pass the checks before timing),
    then copies a result remembered by pointer: only the check of the timed run can see it."""

    def __init__(self, honest_calls: int = 8):
        self.honest_calls = honest_calls
        self.calls = 0
        self.cache: dict = {}

    def __call__(self, a, b, c=None, bias=None):
        c = _out(a, b, c)
        self.calls += 1
        key = (a.data_ptr(), b.data_ptr())
        if self.calls <= self.honest_calls or key not in self.cache:
            torch.matmul(a, b, out=c)
            self.cache[key] = c.clone()
        else:
            c.copy_(self.cache[key])
        return c


honest_then_cached = HonestThenCached()
