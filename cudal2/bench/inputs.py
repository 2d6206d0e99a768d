"""Operands for checks and timing: random normal tensors in the problem's layout, sets of
them to rotate through, and an output buffer with poison inside and guard zones around.

Why each piece exists:
- standard-normal values (never zeros, never 0/1): products of 0/1 inputs are exact in fp16,
  so they cannot tell fp16 accumulation from fp32, nor a half-done kernel from a finished one;
- operands refilled in place between checks: the same pointers with new contents defeat a
  kernel that caches its result by pointer or returns the previous call's output;
- several input sets rotated during timing: together larger than L2, so that neither a cache
  keyed by pointer/content nor a warm L2 can pay;
- NaN poison in the output: an element the kernel never wrote stays NaN and fails;
- guard zones before and after the output, filled with a random pattern: any write past the
  output changes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..codegen.operands import torch_dtype
from ..ir import DTYPE_BYTES, GemmProblem

GUARD_MIN_ELEMENTS = 16384  # 32 KiB of fp16 either side; more for wide rows (see guard_elements)


def _generator(seed: int, device):
    """A generator on the operands' device. Drawing a 16384x12288 operand on the CPU takes
    seconds, and the evaluator draws fresh operands for every candidate; on the GPU it takes
    milliseconds. A seed gives the same values on every CUDA GPU (Philox), so a failure seen
    in a search replays on any GPU from the seed in its reason; the CPU draws other values."""
    import torch

    return torch.Generator(device=device).manual_seed(seed)


# Operands are drawn DRAW_ELEMENTS at a time (in fp32, then rounded): an operand past 2**31
# elements costs its own storage and 256 MiB more, not a float32 copy of itself. Fixed, so that a
# seed gives the same values whatever memory is free; an operand no larger is drawn in one piece,
# as it always was.
DRAW_ELEMENTS = 1 << 26


def _fill_randn(t, generator) -> None:
    """Standard-normal values into t (contiguous, or the transposed view of a contiguous tensor),
    drawn in storage order."""
    import torch

    base = t if t.is_contiguous() else t.t()
    flat = base.view(-1)
    total = flat.numel()
    for i in range(0, total, DRAW_ELEMENTS):
        j = min(i + DRAW_ELEMENTS, total)
        flat[i:j].copy_(torch.randn(j - i, generator=generator, dtype=torch.float32, device=t.device))


def _randn(shape, dtype, device, generator):
    import torch

    t = torch.empty(shape, dtype=dtype, device=device)
    _fill_randn(t, generator)
    return t


@dataclass
class Operands:
    """One input set: a (M, K) and b (K, N) as strided views matching the layout, optional
    bias (N,) and C (M, N) when the epilogue reads them."""

    a: object
    b: object
    bias: object | None = None
    c_in: object | None = None  # the C operand (beta != 0); copied into the output before a call

    def refill(self, seed: int) -> None:
        """New standard-normal values in the same storage (same pointers, new contents)."""
        g = _generator(seed, self.a.device)
        for t in (self.a, self.b, self.bias, self.c_in):
            if t is not None:
                _fill_randn(t, g)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.a, self.b, self.bias, self.c_in) if t is not None)


def make_operands(problem: GemmProblem, seed: int, device="cpu") -> Operands:
    """Random normal operands laid out as the problem says ('T' = column-major view)."""
    g = _generator(seed, device)
    dt = torch_dtype(problem.dtype)
    m, n, k = problem.shape
    a = _randn((m, k), dt, device, g) if problem.a_row_major else _randn((k, m), dt, device, g).t()
    b = _randn((k, n), dt, device, g) if problem.b_row_major else _randn((n, k), dt, device, g).t()
    cdt = torch_dtype(problem.c_dtype)
    bias = _randn((n,), cdt, device, g) if problem.epilogue.bias else None
    c_in = _randn((m, n), cdt, device, g) if problem.epilogue.beta != 0 else None
    return Operands(a, b, bias, c_in)


def rotation_count(problem: GemmProblem, l2_bytes: int, memory_budget: int = 2 << 30,
                   minimum: int = 2, maximum: int = 64, set_cost: int | None = None,
                   free_bytes: int | None = None) -> int:
    """How many input sets to rotate through so that all of them together exceed twice the
    L2 size (then each call finds its operands in DRAM), within a memory budget.

    set_cost: device bytes one more set costs (default: its operands and one output, the bytes a
    call touches). The budget never takes the count below `minimum`; free_bytes (what the device
    can still hold) does: where even `minimum` sets do not fit, as many as fit (at least one).
    One set larger than L2 is in DRAM anyway when it is called again, so little is lost; and the
    checks after timing refill the same storage, so a result cached by pointer still fails."""
    m, n, k = problem.shape
    touched = (m * k + k * n) * DTYPE_BYTES[problem.dtype] + m * n * DTYPE_BYTES[problem.c_dtype]
    cost = max(set_cost if set_cost is not None else touched, 1)
    want = -(-2 * l2_bytes // max(touched, 1))
    fit = max(memory_budget // cost, 1)
    count = int(max(minimum, min(want, fit, maximum)))
    if free_bytes is not None and count * cost > free_bytes:
        count = max(1, min(count, free_bytes // cost))
    return count


def guard_elements(problem: GemmProblem) -> int:
    """At least four output rows; a multiple of 128 elements so that the output view starts
    256-byte aligned, as a fresh allocation would (TMA needs 16 bytes, vector stores like more)."""
    return -(-max(GUARD_MIN_ELEMENTS, 4 * problem.n) // 128) * 128


class GuardedOutput:
    """An (M, N) row-major output view inside a larger buffer: [guard | output | guard].
    poison() fills the output with NaN and the guards with a random pattern it remembers;
    intact_guards() says whether the pattern survived."""

    def __init__(self, problem: GemmProblem, device="cpu", seed: int = 0x5EED):
        import torch

        self.problem = problem
        self.guard = guard_elements(problem)
        m, n = problem.m, problem.n
        dt = torch_dtype(problem.c_dtype)
        self.storage = torch.empty(2 * self.guard + m * n, dtype=dt, device=device)
        self.c = self.storage[self.guard:self.guard + m * n].view(m, n)
        # drawn where it lives (as the operands are): a pattern drawn on the host and copied over
        # waited for the GPU each time, 5.6 ms an output in an H100 search's worker profile
        pattern = _randn((2 * self.guard,), dt, self.storage.device, _generator(seed, self.storage.device))
        self._pattern_bits = pattern.view(torch.int16).clone()
        self._pattern = pattern

    def _guards(self):
        return self.storage[:self.guard], self.storage[self.guard + self.c.numel():]

    def poison(self, c_in=None) -> None:
        """NaN in every output element (or C's values when the epilogue reads C), pattern in
        the guards."""
        if c_in is None:
            self.c.fill_(float("nan"))
        else:
            self.c.copy_(c_in)
        lo, hi = self._guards()
        lo.copy_(self._pattern[:self.guard])
        hi.copy_(self._pattern[self.guard:])

    def intact_guards(self) -> tuple[bool, int]:
        """(intact, number of guard elements that changed), compared bit for bit."""
        import torch

        lo, hi = self._guards()
        now = torch.cat([lo, hi]).view(torch.int16)
        changed = int((now != self._pattern_bits).sum().item())
        return changed == 0, changed
